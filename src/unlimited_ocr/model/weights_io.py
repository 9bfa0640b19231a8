"""Reading safetensors checkpoints without mapping them: a load peaks at the weights themselves.

``safetensors`` maps a file into memory; every page a load touches then counts in the process's RSS next to the
copy the model keeps (file-backed, reclaimable, but counted), and transformers' threaded loader materialises tensors
ahead of the one it is placing. Loading the official checkpoint (6.7 GB of bfloat16 on disk) as a 13.4 GB float32
model peaked at 22.4 GB that way, on a machine of 24 GB.

Here each tensor's bytes are read (``pread``) into a fresh, 64-byte-aligned allocation only when transformers asks
for it, and the loader is kept sequential, so the peak is the model plus the tensor in flight:

* :func:`read_safetensors`: every tensor of a file, read eagerly (the int8 loader's input);
* :func:`lazy_state_dict`: name -> :class:`FileTensor` for every file of a checkpoint folder, handed to
  ``from_pretrained(state_dict=...)`` so that transformers' own renaming and conversions still apply;
* :func:`sequential_loading`: transformers' switch for its one-tensor-at-a-time loader.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import torch

SAFETENSORS_DTYPES = {"I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32,
                      "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
                      "F64": torch.float64, "BOOL": torch.bool}


def _header(stream) -> tuple[dict, int]:
    """(name -> {dtype, shape, data_offsets}, offset of the data block) of an open .safetensors file."""
    (length,) = struct.unpack("<Q", stream.read(8))
    header = json.loads(stream.read(length))
    header.pop("__metadata__", None)
    return header, 8 + length


def _read_into(fd: int, offset: int, nbytes: int, shape: list[int], dtype: torch.dtype, where: str) -> torch.Tensor:
    tensor = torch.empty(shape, dtype=dtype)
    if tensor.numel() == 0:
        return tensor
    buffer = memoryview(tensor.view(-1).view(torch.uint8).numpy())
    if buffer.nbytes != nbytes:
        raise ValueError(f"{where} holds {nbytes} bytes, its shape needs {buffer.nbytes}")
    done = 0
    while done < nbytes:  # pread may return short counts on large reads
        count = os.preadv(fd, [buffer[done:]], offset + done)
        if count <= 0:
            raise ValueError(f"{where}: file truncated")
        done += count
    return tensor


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a .safetensors file, each read straight into its own fresh allocation.

    Not ``safetensors.torch.load_file``: that maps the file (an int8 checkpoint of the official shapes, 4.2 GB,
    loaded at an 8.4 GB peak), and the tensors it returns may start 4 bytes off a 64-byte boundary, where the int8
    kernel's vector loads crash (measured: a segfault)."""
    with open(path, "rb") as stream:
        header, base = _header(stream)
        fd = stream.fileno()
        return {name: _read_into(fd, base + info["data_offsets"][0], info["data_offsets"][1] - info["data_offsets"][0],
                                 info["shape"], SAFETENSORS_DTYPES[info["dtype"]], f"{path}: {name}")
                for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])}


class FileTensor:
    """One tensor of a safetensors file, read when indexed (``t[...]``, how transformers materialises a
    checkpoint entry). Thread-safe: ``pread`` on a descriptor shared by the whole file."""

    def __init__(self, fd: int, offset: int, nbytes: int, shape: list[int], dtype: torch.dtype, where: str):
        self.fd, self.offset, self.nbytes, self.where = fd, offset, nbytes, where
        self.shape, self.dtype = torch.Size(shape), dtype

    def __getitem__(self, index) -> torch.Tensor:
        tensor = _read_into(self.fd, self.offset, self.nbytes, list(self.shape), self.dtype, self.where)
        return tensor if index is Ellipsis else tensor[index]

    def get_shape(self) -> list[int]:  # the safetensors slice interface
        return list(self.shape)


def checkpoint_files(folder: str | Path) -> list[Path]:
    """The .safetensors files of a checkpoint folder: the index's shards, or ``model.safetensors``."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / shard for shard in shards]
    single = folder / "model.safetensors"
    return [single] if single.exists() else []


@contextlib.contextmanager
def lazy_state_dict(folder: str | Path) -> Iterator[dict[str, FileTensor]]:
    """name -> :class:`FileTensor` over every file of ``folder``; the files stay open inside the ``with``."""
    with contextlib.ExitStack() as stack:
        state: dict[str, FileTensor] = {}
        for path in checkpoint_files(folder):
            stream = stack.enter_context(open(path, "rb"))
            header, base = _header(stream)
            for name, info in header.items():
                start, end = info["data_offsets"]
                state[name] = FileTensor(stream.fileno(), base + start, end - start, info["shape"],
                                         SAFETENSORS_DTYPES[info["dtype"]], f"{path}: {name}")
        yield state


@contextlib.contextmanager
def sequential_loading() -> Iterator[None]:
    """transformers materialises checkpoint tensors on 4 threads, far ahead of the one it places (all of them can
    be alive at once); its switch ``HF_DEACTIVATE_ASYNC_LOAD`` makes it read each tensor when it places it."""
    previous = os.environ.get("HF_DEACTIVATE_ASYNC_LOAD")
    os.environ["HF_DEACTIVATE_ASYNC_LOAD"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("HF_DEACTIVATE_ASYNC_LOAD", None)
        else:
            os.environ["HF_DEACTIVATE_ASYNC_LOAD"] = previous
