"""The learning algorithms: one readable file each, sharing the loss pieces in `losses.py`.

    grpo.py  no critic; advantages relative to a group of samples of the same task; KL to
             the reference (the LoRA adapter switched off)
    ppo.py   a value head as critic; turn-level GAE advantages; value loss
"""
