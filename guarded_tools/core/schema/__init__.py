"""JSON Schema: validation, keywords, ECMA-262 patterns, strict JSON parsing."""
