import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A 2-D convolution, a group norm and a tanh.
    """

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        return torch.tanh(self.norm(self.conv(x)))


batch_size = 2
in_channels = 3
out_channels = 8
height = width = 12
kernel_size = 3
num_groups = 4


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
