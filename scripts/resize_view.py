"""Write a copy of a model folder whose global view is another size (e.g. trained on 512-px crops, read at 1536).

    python scripts/resize_view.py runs/real-s3/export /tmp/real-s3-1536 --image-size 1536

Only SAM's absolute position grid depends on the view size; it is resized as `train --init-from` resizes it
(train/modeling.py). Pages then keep their pixel scale: a 144-dpi Letter page fits a 1536-px view unshrunk.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

from unlimited_ocr.train.modeling import load_weights_resizing_views


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--image-size", type=int, required=True)
    args = parser.parse_args()
    source, target = Path(args.source), Path(args.target)
    config = UnlimitedOcrConfig.from_pretrained(source)
    config.vision_config.sam_config.image_size = args.image_size
    model = UnlimitedOcrForConditionalGeneration._from_config(config, attn_implementation="sdpa")
    reference = UnlimitedOcrForConditionalGeneration.from_pretrained(source)  # names as the model holds them
    resized = load_weights_resizing_views(model, reference.state_dict())
    model.generation_config = reference.generation_config
    model.save_pretrained(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "training_config.json"):
        if (source / name).exists():
            shutil.copy(source / name, target / name)
    print(f"{target}: view {args.image_size} px, resized {resized}")


if __name__ == "__main__":
    main()
