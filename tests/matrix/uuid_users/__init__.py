"""A custom user model with a UUID primary key, installed only in the matrix's uuid rows."""
