"""The REST transport: views, OpenAPI, strict parsing, the exception handler."""
