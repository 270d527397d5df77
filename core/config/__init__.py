"""The run configuration: a TOML file checked against frozen dataclasses, every setting with a default."""

from core.config.load import ConfigError, check_ray_address, config_to_dict, load_config, parse_config
from core.config.schema import (
    BudgetConfig,
    ClusterConfig,
    EvaluationConfig,
    FleetConfig,
    FleetSection,
    GpuConfig,
    LlmConfig,
    ModelProfile,
    PlannerConfig,
    TunerConfig,
    model_profiles,
)

__all__ = [
    "BudgetConfig",
    "ClusterConfig",
    "ConfigError",
    "check_ray_address",
    "EvaluationConfig",
    "FleetConfig",
    "FleetSection",
    "GpuConfig",
    "LlmConfig",
    "ModelProfile",
    "PlannerConfig",
    "TunerConfig",
    "config_to_dict",
    "load_config",
    "model_profiles",
    "parse_config",
]
