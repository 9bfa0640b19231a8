"""Resolve ``--model`` and load it: our checkpoints and the official one go through the same transformers class.

Accepted:
* a local folder in transformers format (``config.json`` with ``model_type: unlimited_ocr``, safetensors, tokenizer);
* the official checkpoint folder (``model_type: unlimited-ocr``, ``auto_map`` to remote code, text config under
  ``language_config``): read with the explicit ``UnlimitedOcrConfig`` class, never with remote code; transformers
  renames the original tensor names at load time;
* a DeepSeek-OCR folder (``model_type: deepseek_vl_v2``, ``DeepseekOCRForCausalLM``), the full-attention model
  Unlimited-OCR continues from: the same tensor names and the same towers, so it loads into the same class with
  every decoder layer set to full attention and its own default prompt (``Free OCR.``);
* a hub id, only when online (``HF_HUB_OFFLINE=1`` restricts it to the local hub cache).
* nothing: the bundled checkpoint shipped inside the package;
* the name of a checkpoint shipped inside the package (``unlimited-ocr-tiny``, ``unlimited-ocr-tiny-print``: the
  real-document preview, see its MODEL_CARD.md), when no local folder has that name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerBase, UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

from . import sam_attention
from .positions import PagePositions
from .prompt import default_prompt
from .weights_io import checkpoint_files, lazy_state_dict, sequential_loading

CHECKPOINTS_DIR = Path(__file__).resolve().parent.parent / "checkpoints"
BUNDLED_DIR = CHECKPOINTS_DIR / "unlimited-ocr-tiny"  # the default


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def dtype_from_name(name: str | None) -> torch.dtype | None:
    """``--dtype`` -> torch dtype; ``None`` or ``"auto"``: bfloat16 on CUDA, float32 on CPU (see :func:`load_model`)."""
    if name in (None, "auto"):
        return None
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"--dtype must be auto or one of {sorted(DTYPES)}, not {name!r}") from None


# Released DeepSeek-OCR folders name their config "deepseek_vl_v2" (remote code: DeepseekOCRConfig); some copies
# carry the remote class's own name.
DEEPSEEK_OCR_MODEL_TYPES = frozenset({"deepseek_vl_v2", "deepseekocr", "DeepseekOCR"})
DEEPSEEK_OCR_PROMPT = "Free OCR."  # DeepSeek-OCR's plain-text instruction (no layout boxes)


def checkpoint_family(raw_config: dict) -> str:
    """'deepseek-ocr' for a DeepSeek-OCR folder (full attention, its own prompt), else 'unlimited-ocr'."""
    architectures = raw_config.get("architectures") or []
    if raw_config.get("model_type") in DEEPSEEK_OCR_MODEL_TYPES or "DeepseekOCRForCausalLM" in architectures:
        return "deepseek-ocr"
    return "unlimited-ocr"


class ModelNotFoundError(RuntimeError):
    """The ``--model`` argument names nothing we can load (offline, missing folder, wrong files)."""


@dataclass
class LoadedModel:
    """A model and everything the engine needs to lay out prompts for it."""

    model: UnlimitedOcrForConditionalGeneration
    tokenizer: PreTrainedTokenizerBase
    source: str  # where it came from (folder or hub id), for logs and the JSON output
    image_size: int  # global view side in pixels (base mode)
    queries_per_side: int  # visual tokens per side of the global view
    tile_size: int  # gundam tile side in pixels
    queries_per_tile_side: int  # 0 when gundam tiles are not available for this checkpoint
    image_token_id: int
    page_token_id: int | None  # id of "<PAGE>", the page separator of multi-page outputs
    eos_token_id: int
    family: str = "unlimited-ocr"  # or "deepseek-ocr": which prompts the checkpoint was trained on

    def default_prompt(self, num_pages: int) -> str:
        """The instruction used when none is given: ours (one page / multi-page), or DeepSeek-OCR's plain OCR."""
        return DEEPSEEK_OCR_PROMPT if self.family == "deepseek-ocr" else default_prompt(num_pages)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def window(self) -> int:
        return int(self.model.config.text_config.sliding_window)

    @property
    def positions(self) -> PagePositions:
        """Rotary ids of prompt and output: page-anchored when the checkpoint says so (``page_position_stride``)."""
        stride = getattr(self.model.config, "page_position_stride", None)
        return PagePositions(stride=int(stride) if stride else None, image_token_id=self.image_token_id,
                             page_token_id=self.page_token_id)

    @property
    def reflow_tile(self) -> int | None:
        """Tile side when the checkpoint reads pages reflowed into tiles of whole lines (``reflow_tile`` in its
        config.json: a model trained on crops at native resolution, model/reflow.py); None: one view per page."""
        tile = getattr(self.model.config, "reflow_tile", None)
        return int(tile) if tile else None

    @property
    def reflow_line_height(self) -> int | None:
        """With ``reflow_tile``: the height in px every page's median text line is scaled to on the tiles
        (``reflow_line_height`` in config.json); None: pages are scaled only when their lines are outside 16-25 px."""
        height = getattr(self.model.config, "reflow_line_height", None)
        return int(height) if height else None

    @property
    def trained_attention(self) -> str:
        """'rswa' or 'full': what the checkpoint's layers were configured with."""
        types = set(self.model.config.text_config.layer_types)
        return "full" if types == {"full_attention"} else "rswa"


def bundled_checkpoint() -> Path | None:
    return BUNDLED_DIR if (BUNDLED_DIR / "config.json").exists() else None


def resolve_model_path(model: str | os.PathLike | None) -> str:
    """Turn ``--model`` into a local folder or a hub id; raise :class:`ModelNotFoundError` with a clear message."""
    if model is None:
        bundled = bundled_checkpoint()
        if bundled is None:
            raise ModelNotFoundError(
                "no --model given and no bundled checkpoint is installed; pass --model /path/to/checkpoint"
            )
        return str(bundled)
    path = Path(model).expanduser()
    shipped = CHECKPOINTS_DIR / str(model)
    if not path.exists() and "/" not in str(model) and (shipped / "config.json").exists():
        return str(shipped)  # a checkpoint shipped with the package, by name
    if path.exists():
        if not (path / "config.json").exists():
            raise ModelNotFoundError(f"{path}: not a model folder (no config.json)")
        return str(path)
    if str(model).startswith((".", "/", "~")) or os.sep in str(model) and str(model).count("/") != 1:
        raise ModelNotFoundError(f"{model}: no such folder")
    return str(model)  # a hub id: from_pretrained resolves it (cache only when HF_HUB_OFFLINE=1)


def load_model(
    model: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    attn_implementation: str = "sdpa",
    experts_implementation: str | None = None,
) -> LoadedModel:
    """Load a checkpoint for inference (eval mode, no grad needed). Never runs remote code."""
    source = resolve_model_path(model)
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    kwargs = {"local_files_only": offline}
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        config = UnlimitedOcrConfig.from_pretrained(source, **kwargs)
        family = checkpoint_family({"model_type": config.model_type, "architectures": config.architectures})
        if config.model_type != UnlimitedOcrConfig.model_type:
            # The official folder says "unlimited-ocr" (its remote-code name); transformers finds the tensor
            # renaming of the original checkpoint under its own name, so use that one.
            config.model_type = UnlimitedOcrConfig.model_type
        if hasattr(config, "auto_map"):
            del config.auto_map  # never follow the pointer to remote code
        if family == "deepseek-ocr":
            # The model R-SWA was trained from: same layers, every one attending to the whole sequence. The text
            # config keeps its placeholder window (the class requires one); the layer types decide the attention.
            text = config.text_config
            text.layer_types = ["full_attention"] * text.num_hidden_layers
        if getattr(config, "unlimited_ocr_quantization", None) in ("int8", "int4"):  # `unlimited-ocr quantize`
            from .int8 import load_int8_model

            if dtype != torch.float32 or not Path(source).is_dir():
                raise ValueError(f"{source}: a quantized checkpoint runs from a local folder with float32 activations "
                                 "(--dtype float32, the CPU default)")
            network_model = load_int8_model(source, config)
        else:
            extra = {"experts_implementation": experts_implementation} if experts_implementation else {}
            if Path(source).is_dir() and checkpoint_files(source):
                # Read tensor by tensor, never mapped: the load peaks at the model itself (weights_io.py).
                with lazy_state_dict(source) as state, sequential_loading():
                    network_model = UnlimitedOcrForConditionalGeneration.from_pretrained(
                        None, config=config, dtype=dtype, attn_implementation=attn_implementation, state_dict=state,
                        **extra, **kwargs)
                if (Path(source) / "generation_config.json").exists():
                    network_model.generation_config = GenerationConfig.from_pretrained(source)
            else:
                network_model = UnlimitedOcrForConditionalGeneration.from_pretrained(
                    source, config=config, dtype=dtype, attn_implementation=attn_implementation, **extra, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, **kwargs)
    except OSError as error:
        hint = " (HF_HUB_OFFLINE=1: only local folders and the hub cache are used)" if offline else ""
        raise ModelNotFoundError(f"cannot load model {source!r}: {error}{hint}") from error
    network_model.to(device).eval()
    sam_attention.install(network_model)  # the same numbers, faster encodes (model/sam_attention.py)
    sam = config.vision_config.sam_config
    image_size = int(sam.image_size if isinstance(sam.image_size, int) else sam.image_size[0])
    patch = int(sam.patch_size if isinstance(sam.patch_size, int) else sam.patch_size[0])
    queries = image_size // patch // 4
    tile_size = 640 if image_size == 1024 else image_size
    tile_queries = tile_size // patch // 4 if tile_size % (patch * 4) == 0 else 0
    page_id = tokenizer.convert_tokens_to_ids("<PAGE>")
    if page_id is None or page_id == tokenizer.unk_token_id:
        page_id = None
    eos = config.text_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    return LoadedModel(
        model=network_model, tokenizer=tokenizer, source=source, image_size=image_size, queries_per_side=queries,
        tile_size=tile_size, queries_per_tile_side=tile_queries, image_token_id=int(config.image_token_id),
        page_token_id=page_id, eos_token_id=int(eos), family=family,
    )


def read_config_json(folder: str | os.PathLike) -> dict:
    with open(Path(folder) / "config.json", encoding="utf-8") as handle:
        return json.load(handle)
