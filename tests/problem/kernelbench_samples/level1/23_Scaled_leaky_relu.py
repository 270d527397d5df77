import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Leaky ReLU with a negative slope given per call, then a scale.
    """

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, negative_slope: float) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope) * self.scale


batch_size = 16
dim = 257
scale = 3.0


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x, 0.05]


def get_init_inputs():
    return [scale]
