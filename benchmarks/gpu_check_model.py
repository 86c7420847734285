"""A ResNet-50 in plain torch and its bf16 channels_last training step (the gpu_check ceiling).

Written out so the check needs no torchvision; `width` scales every layer (64 is ResNet-50,
the CPU dry run uses a thin one so it finishes in seconds).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True), nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def resnet50(num_classes: int = 1000, width: int = 64) -> nn.Module:
    """ResNet-50 (v1.5: stride in the 3x3 conv): 3, 4, 6, 3 bottlenecks."""
    layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                               nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = width
    for stage, blocks in enumerate((3, 4, 6, 3)):
        mid = width * 2**stage
        for b in range(blocks):
            layers.append(Bottleneck(cin, mid, 2 if (b == 0 and stage > 0) else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


def training_step(device: torch.device, num_classes: int = 1000, width: int = 64,
                  bf16: bool = True) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """A closure doing one SGD step of ResNet-50 in bf16 autocast, channels_last, on `device`.

    bf16=False runs float32 (the CPU dry run: CPUs without bf16 units take seconds per step).
    """
    model = resnet50(num_classes, width).to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        images = images.to(device, non_blocking=True).contiguous(
            memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(images), labels.to(device, non_blocking=True) % num_classes)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step
