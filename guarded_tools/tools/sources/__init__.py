"""Tool sources: DRF serializers, Pydantic models, type hints, viewsets."""
