"""Pipeline adapters, one per diffusers family, and offline builders of tiny pipelines."""
