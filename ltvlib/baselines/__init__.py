"""Extracted task vectors, the paper's baselines: Vanilla TV (Hendel et al. 2023) and Function Vectors
(Todd et al. 2024). Each module holds a frozen config whose defaults are the original paper's, an
extraction function and a vector dataclass that saves to safetensors."""

from .function_vector import FunctionVector, FunctionVectorConfig, extract_function_vector
from .vanilla_tv import VanillaTaskVector, VanillaTVConfig, extract_vanilla_tv

__all__ = [
    "FunctionVector",
    "FunctionVectorConfig",
    "VanillaTVConfig",
    "VanillaTaskVector",
    "extract_function_vector",
    "extract_vanilla_tv",
]
