"""Parameter-efficient training beside the method (it reads a Config, so it sits in the method's layer):

  lora.py   LoRA adapters and the reserved tokens' rows over a frozen model; merged weights; PEFT's files
  quant.py  QLoRA's frozen base: linear layers in 4-bit NF4 (bitsandbytes), dequantized for the engine

Not the method: with lora_rank = 0 (the default) nothing here changes a run, nor with lora_quant = none.
"""
