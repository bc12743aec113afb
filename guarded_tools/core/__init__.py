"""The call's own words: errors, the error catalog, repairs, cancellation, JSON Schema."""
