"""flowrl: online reinforcement learning of flow-matching generators on Hugging Face diffusers."""

__version__ = "0.1.0"
