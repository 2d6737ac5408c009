"""Stage `sft`: supervised fine-tuning on the teacher trajectories (paper 2.2, A.3).

``sft`` (the stage, ``run_sft``), ``config`` (``SFTConfig``), ``data`` (the trajectories as a
TRL dataset, the trained tokens), ``sft_trainer`` (TRL's trainer with the weighted loss and the
time-aware schedule), ``checkpoint`` (load, freeze, LoRA, save; GRPO uses it too), ``heldout``
(the held-out tasks both training stages evaluate on), ``plots`` (notebook 06), ``commands``
(``vsearcher-lite sft``).
"""

import logging

from vsearcher_lite.training.config import SFTConfig

# TRL imports bitsandbytes, which on some CPUs logs "Failed to load CPU gemm_4bit_forward": noise
# here, as only QLoRA on a CPU would use that kernel (the cpu profile trains in fp32).
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

__all__ = ["SFTConfig"]
