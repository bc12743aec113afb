"""End-to-end tests: live servers, browsers, processes, the demo, the bench."""
