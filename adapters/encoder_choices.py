"""What an encoder is built with: its backend and its quantization (``embedder.backend`` and
``embedder.quantize`` in the configuration), declared once for the configuration and the adapters
(a module without imports: the configuration loads without numpy)."""

from __future__ import annotations

from typing import Literal

Backend = Literal["torch", "onnx", "openvino"]
BackendChoice = Literal["auto", Backend]  # auto: the fastest installed backend for the device
Quantize = Literal["none", "int8"]
