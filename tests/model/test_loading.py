"""Loading: our transformers-format folders, the official checkpoint layout, and clear errors."""

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import random_pages
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.engine.reference import new_tokens, transformers_generate
from unlimited_ocr.model.loading import ModelNotFoundError, load_model, resolve_model_path


def _official_layout(source, target):
    """Rewrite a small checkpoint into the official folder layout: original config keys (text config under
    ``language_config``, ``sliding_window`` on top, ``auto_map`` to remote code, vision described by ``width``)
    and original tensor names. transformers ignores the original vision sizes and builds the full SAM-B + CLIP-L
    tower, so the language model is small but the vision tensors are left out (they load as random init)."""
    config = json.loads((source / "config.json").read_text())
    text = config["text_config"]
    language = {key: text[key] for key in [
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "n_shared_experts", "n_routed_experts", "num_experts_per_tok",
        "topk_method", "bos_token_id", "eos_token_id", "max_position_embeddings"]}
    language.update(first_k_dense_replace=1, model_type="deepseek_v2", use_mla=False, kv_lora_rank=None,
                    rope_theta=10000.0)
    official = {
        "model_type": "unlimited-ocr",
        "architectures": ["UnlimitedOCRForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_unlimited_ocr.UnlimitedOCRConfig",
                     "AutoModel": "modeling_unlimited_ocr.UnlimitedOCRForCausalLM"},
        "language_config": language,
        "sliding_window": text["sliding_window"],
        "vision_config": {"image_size": 1024, "mlp_ratio": 3.7362,
                          "width": {"sam_vit_b": {"downsample_channels": [512, 1024], "layers": 12, "width": 768},
                                    "clip-l-14-224": {"heads": 16, "layers": 24, "width": 1024}}},
        "projector_config": {"input_dim": 2048, "n_embed": text["hidden_size"], "projector_type": "linear"},
        "image_token_id": config["image_token_id"],
        "torch_dtype": "float32",
    }
    target.mkdir()
    (target / "config.json").write_text(json.dumps(official))
    tensors = load_file(source / "model.safetensors")
    kept = {name: t for name, t in tensors.items() if not name.startswith(("model.sam_model", "model.vision_model"))}
    generator = torch.Generator().manual_seed(0)
    kept["model.projector.layers.weight"] = torch.randn(text["hidden_size"], 2048, generator=generator) * 0.02
    kept["model.projector.layers.bias"] = torch.zeros(text["hidden_size"])
    save_file(kept, target / "model.safetensors")
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(source / name, target / name)
    return kept


@pytest.mark.slow
def test_official_layout_loads_without_remote_code(tiny_checkpoint, tmp_path):
    tensors = _official_layout(tiny_checkpoint, tmp_path / "official")
    loaded = load_model(tmp_path / "official")
    language = loaded.model.model.language_model
    # Original names were renamed by transformers on load: our tensors arrive where they belong.
    assert torch.equal(language.layers[0].self_attn.q_proj.weight, tensors["model.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(language.embed_tokens.weight, tensors["model.embed_tokens.weight"])
    assert torch.equal(loaded.model.model.view_separator, tensors["model.view_seperator"])
    assert loaded.window == json.loads((tiny_checkpoint / "config.json").read_text())["text_config"]["sliding_window"]
    assert loaded.image_size == 1024 and loaded.queries_per_side == 16  # official vision defaults
    engine = OcrEngine(loaded)
    [result] = engine.generate([random_pages(1, seed=3)], DecodeOptions(max_new_tokens=3, ignore_eos=True))
    assert result.reference_length > 273 and len(result.token_ids) == 3


def _deepseek_ocr_layout(source, target):
    """Rewrite a small checkpoint into DeepSeek-OCR's released layout (deepseek-ai/DeepSeek-OCR): ``model_type:
    deepseek_vl_v2``, ``DeepseekOCRForCausalLM`` behind ``auto_map``, the decoder under ``language_config`` with no
    window at all (full attention), its fields repeated at the top level, the original tensor names. As in the
    official layout, transformers builds the full vision tower whatever the vision entry says, so the vision tensors
    are left out (random init) and the language model stays small."""
    official = target.parent / (target.name + "-unlimited")
    kept = _official_layout(source, official)
    config = json.loads((official / "config.json").read_text())
    language = dict(config["language_config"], architectures=["DeepseekV2ForCausalLM"], lm_head=True, rm_head=False,
                    n_group=1, topk_group=1, q_lora_rank=None, qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=0)
    deepseek = {
        "_name_or_path": "deepseek-ai/DeepSeek-OCR",
        "architectures": ["DeepseekOCRForCausalLM"],
        "auto_map": {"AutoConfig": "modeling_deepseekocr.DeepseekOCRConfig",
                     "AutoModel": "modeling_deepseekocr.DeepseekOCRForCausalLM"},
        "candidate_resolutions": [[1024, 1024]], "global_view_pos": "head", "tile_tag": "2D",
        "language_config": language,
        "model_type": "deepseek_vl_v2",
        "projector_config": dict(config["projector_config"], model_type="mlp_projector"),
        "vision_config": dict(config["vision_config"], model_name="deeplip_b_l", model_type="vision"),
        "image_token_id": config["image_token_id"],
        "torch_dtype": "float32",
        **{key: value for key, value in language.items() if key not in ("architectures", "model_type")},
    }
    shutil.copytree(official, target)
    (target / "config.json").write_text(json.dumps(deepseek))
    return kept


@pytest.mark.slow
def test_deepseek_ocr_layout_runs_full_attention_equal_to_transformers(tiny_checkpoint, tmp_path):
    """A DeepSeek-OCR folder loads into the same class with every layer on full attention (no R-SWA window in its
    config), its own prompt, and our engine's decode equals transformers' generate() on the same weights, past the
    growing cache's first reallocation (256 decode slots)."""
    tensors = _deepseek_ocr_layout(tiny_checkpoint, tmp_path / "DeepSeek-OCR")
    loaded = load_model(tmp_path / "DeepSeek-OCR")
    assert loaded.family == "deepseek-ocr" and loaded.trained_attention == "full"
    assert loaded.default_prompt(1) == loaded.default_prompt(3) == "Free OCR."
    language = loaded.model.model.language_model
    assert torch.equal(language.layers[1].mlp.gate.weight, tensors["model.layers.1.mlp.gate.weight"])
    assert torch.equal(loaded.model.lm_head.weight, tensors["lm_head.weight"])
    engine = OcrEngine(loaded)  # attention: what the checkpoint says, i.e. full
    assert engine.attention == "full"
    pages = random_pages(1, seed=6)
    new = 260
    [result] = engine.generate([pages], DecodeOptions(max_new_tokens=new, ignore_eos=True))
    ids, _ = engine.prepare(pages, DecodeOptions())
    assert tokenizer_text(loaded, ids).endswith("\nFree OCR.")
    assert result.reference_length == ids.shape[0] and len(result.token_ids) == new
    assert result.kv_entries == result.reference_length + new - 1  # every token but the last was cached
    output = transformers_generate(loaded, [engine.preprocess(page) for page in pages], ids, new, force_length=True)
    assert result.token_ids == new_tokens(loaded, output, ids.shape[0])
    assert len(set(result.token_ids)) > 10


def tokenizer_text(loaded, ids):
    return loaded.tokenizer.decode(ids[ids != loaded.image_token_id].tolist())


def test_missing_and_offline_models_fail_clearly(tmp_path, monkeypatch):
    with pytest.raises(ModelNotFoundError, match="no such folder"):
        resolve_model_path(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(tmp_path / "empty")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        load_model("someone/not-cached-model")


def test_shipped_checkpoints_resolve_by_name_and_a_local_folder_of_that_name_wins(tmp_path, monkeypatch):
    from unlimited_ocr.model.loading import BUNDLED_DIR, CHECKPOINTS_DIR

    monkeypatch.chdir(tmp_path)
    shipped = sorted(path.name for path in CHECKPOINTS_DIR.iterdir() if (path / "config.json").exists())
    assert BUNDLED_DIR.name in shipped
    for name in shipped:
        assert resolve_model_path(name) == str(CHECKPOINTS_DIR / name)
    (tmp_path / BUNDLED_DIR.name).mkdir()  # a user's own folder of the same name is what they mean
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(BUNDLED_DIR.name)
    assert resolve_model_path("not-shipped") == "not-shipped"  # anything else stays a hub id


def test_opt_in_full_size_official_checkpoint():
    folder = os.environ.get("UOCR_OFFICIAL_MODEL")
    if not folder:
        pytest.skip("set UOCR_OFFICIAL_MODEL=/path/to/Unlimited-OCR to load the real checkpoint")
    loaded = load_model(folder, device="cuda" if torch.cuda.is_available() else "cpu")
    [result] = OcrEngine(loaded).generate([random_pages(1)], DecodeOptions(max_new_tokens=8))
    assert result.reference_length > 273


def test_unmapped_loading_equals_transformers_own_loading_for_single_and_sharded_folders(tiny_checkpoint, tmp_path):
    """load_model reads tensors one by one without mapping the files (model/weights_io.py); the model must be
    exactly what transformers' own from_pretrained builds, parameters and buffers, also from a sharded folder, and
    keep the folder's generation config."""
    from transformers import UnlimitedOcrForConditionalGeneration

    reference = UnlimitedOcrForConditionalGeneration.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    sharded = tmp_path / "sharded"
    reference.save_pretrained(sharded, max_shard_size="200KB")
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(tiny_checkpoint / name, sharded / name)
    assert len(list(sharded.glob("model-*.safetensors"))) > 2 and (sharded / "model.safetensors.index.json").exists()
    expected = {**dict(reference.named_parameters()), **dict(reference.named_buffers())}
    for folder in (tiny_checkpoint, sharded):
        loaded = load_model(folder).model
        got = {**dict(loaded.named_parameters()), **dict(loaded.named_buffers())}
        assert got.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(got[name], tensor), name
        assert loaded.generation_config.to_dict() == reference.generation_config.to_dict()
