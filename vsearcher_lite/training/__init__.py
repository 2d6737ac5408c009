"""Training stages: supervised fine-tuning on teacher trajectories (``sft``)."""

import logging

from vsearcher_lite.training.config import SFTConfig

# TRL imports bitsandbytes, which on a CPU with AVX512-BF16 tries to fetch a 4-bit matmul kernel from
# the Hub and logs "Failed to load CPU gemm_4bit_forward from kernels-community" when it cannot. Only
# QLoRA on a CPU would use that kernel (never the cpu profile, which trains in fp32), so the message
# is noise here; errors from that module still show.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

__all__ = ["SFTConfig"]
