import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A linear layer with a learned extra bias, then a softmax; returns the probabilities and their row maxima.
    """

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.extra_bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        probs = torch.softmax(self.linear(x) + self.extra_bias, dim=-1)
        return probs, probs.amax(dim=-1)


batch_size = 8
in_features = 40
out_features = 24


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
