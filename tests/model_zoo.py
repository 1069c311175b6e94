"""Small models covering the shapes of real architectures, shared by the tests."""

import torch
import torch.nn.functional as F
from torch import nn


def mlp():
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 3))


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))  # the same relu module is called twice
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class ResNet(nn.Module):
    def __init__(self, blocks=2, c=8, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.layer1 = nn.Sequential(*[Block(c) for _ in range(blocks)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.layer1(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


class TransformerClassifier(nn.Module):
    def __init__(self, vocab=50, d=16, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=2, dim_feedforward=32, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


class LSTMClassifier(nn.Module):
    def __init__(self, vocab=50, d=16, hidden=24, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        out, (h, _) = self.lstm(self.embed(tokens))
        return self.head(h[-1])


class Functional(nn.Module):
    """Mixes torch.nn.functional calls and tensor methods with modules."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 20)
        self.fc2 = nn.Linear(20, 5)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = h.view(h.size(0), -1).tanh()
        h = torch.cat([h, h * 0.5], dim=1)[:, :20]
        return F.log_softmax(self.fc2(h), dim=-1)


class DataDependent(nn.Module):
    """Control flow on the data: torch.fx cannot trace it."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if h.sum() > 0:
            h = self.fc2(h)
        return self.out(h)


class SignBranch(nn.Module):
    """Each batch takes one of two paths by the sign of its sum: torch.fx cannot trace it, and a graph
    recorded with hooks on one example sees only the path that example took."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(6, 8)
        self.positive = nn.Linear(8, 8)
        self.negative = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = self.positive(h) if x.sum() > 0 else self.negative(h)
        return self.head(h)


def deep_resnet(blocks=72, c=4):
    """About 500 graph nodes: for the layout-time measurement."""
    return ResNet(blocks=blocks, c=c)


class Batches:
    """Ready batches, read in order as they are (a list would be read as a Dataset of items): sequences of
    different lengths, each unpadded in a batch of its own."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)
