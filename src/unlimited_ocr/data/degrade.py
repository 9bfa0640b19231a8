"""Scan-like degradations: small rotation, resolution loss, blur, sensor noise.

They change pixels only, never the ground truth. Each is drawn per page from the
caller's random.Random, so a degraded page is as reproducible as a clean one.
"""

from __future__ import annotations

import random

import numpy as np
from PIL import Image, ImageFilter

from .config import DegradeConfig


def degrade_page(image: Image.Image, rng: random.Random, config: DegradeConfig, paper: int) -> Image.Image:
    """Apply the configured degradations to a mode-"L" page; returns a new image (or the same if none fired)."""
    # Draw every decision up front, in a fixed order, so enabling one degradation
    # never shifts the random stream of the others.
    rotate = rng.random() < config.rotation_probability
    angle = rng.uniform(-config.max_rotation_degrees, config.max_rotation_degrees)
    downscale = rng.random() < config.downscale_probability
    factor = rng.uniform(*config.downscale_factor)
    blur = rng.random() < config.blur_probability
    radius = rng.uniform(*config.blur_radius)
    noise = rng.random() < config.noise_probability
    noise_std = rng.uniform(*config.noise_std)
    noise_seed = rng.getrandbits(64)

    if rotate and angle != 0.0:
        image = image.rotate(angle, resample=Image.Resampling.BILINEAR, fillcolor=paper)
    if downscale:
        width, height = image.size
        small = image.resize((max(1, round(width * factor)), max(1, round(height * factor))), Image.Resampling.BILINEAR)
        image = small.resize((width, height), Image.Resampling.BILINEAR)
    if blur:
        image = image.filter(ImageFilter.GaussianBlur(radius))
    if noise:
        pixels = np.asarray(image, dtype=np.float32)
        pixels = pixels + np.random.default_rng(noise_seed).normal(0.0, noise_std, size=pixels.shape).astype(np.float32)
        image = Image.fromarray(np.clip(pixels + 0.5, 0, 255).astype(np.uint8))  # 2-D uint8 → mode "L"
    return image
