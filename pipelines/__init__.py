"""``flowrl.pipelines`` (this folder, ``pipelines/``: ``setup.py``'s ``SOURCE_FOLDERS``): pipeline adapters, one
per diffusers family, and offline builders of tiny pipelines."""
