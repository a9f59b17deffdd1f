"""``flowrl eval checkpoint``: a checkpoint (a LoRA of any of the tools that train flow models, or a flowrl run)
drawn and scored beside its base model on GenEval, OCR, DrawBench's reward table and the benchmarks named by
module path, with the published protocols as presets.

Modules: ``lora`` (the LoRA formats, read, checked against the base, written for diffusers), ``protocols``
(the presets and the reward table's columns), ``suites`` (the benchmarks), ``evaluate`` (drawing and scoring),
``page`` (the table and the HTML page), ``cli`` (the command).
"""
