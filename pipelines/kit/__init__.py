"""What every family shares, so that no family imports another's module:

* ``loading``: dtypes, hub id / local folder / single-file checks, ``load_pretrained_pipeline`` with its one-line
  offline error (``HubUnavailableError``);
* ``attention``: diffusers' dispatcher backends, their probe, ``set_dispatcher_attention_backend``;
* ``prompts``: the prompt-embedding LRU (``cached_rows``);
* ``lora``: the peft config as LoRA export metadata (``lora_metadata``);
* ``layout``: ``Layout``, one sample's latent shape and token count (each family's ``layout`` module fills it);
* ``tiny``: word tokenizers, tiny text encoders and seeded RNG streams for the offline tiny builders.
"""
