"""Image outputs as Core ML hands them to coremltools: PIL images.

coremlrt's own :class:`coremlrt.MLModel` returns an image output as the array the model
computed, the layout image inputs take: float32 ``[1, C, H, W]``, channels in the image's
color order (R, G, B for RGB; B, G, R for BGR; one channel for the grayscale spaces). Core ML
instead fills an image buffer from it (32BGRA for RGB and BGR, alpha 255; OneComponent8 for
GRAYSCALE; OneComponent16Half for GRAYSCALE_FLOAT16), which coremltools' ``predict`` hands to
Python as a PIL image of mode ``"RGBA"`` (channels permuted to R, G, B, A), ``"L"`` or ``"F"``
(docs/design/coreml-format.md, "Image outputs").
:func:`core_ml_image` makes that image; the coremltools stand-in
(:mod:`coremlrt.coremltools_backend`) returns it.

An 8-bit pixel holds a whole number from 0 to 255. How Core ML rounds and clamps any other
value into one is not specified, so such a value raises :class:`coremlrt.Error` naming the
output and the value rather than becoming a guessed pixel (the array itself stays available
from :class:`coremlrt.MLModel`).
"""

import numpy as np

from ._core import Error

_CHANNELS = {"RGB": 3, "BGR": 3, "GRAYSCALE": 1, "GRAYSCALE_FLOAT16": 1}


def image_output_spaces(function):
    """{output name: color space} of a loaded function's image outputs."""
    return {f["name"]: f["color_space"] for f in function["outputs"] if f["kind"] == "image"}


def core_ml_image(name, array, color_space):
    """The PIL image Core ML makes of image output ``name`` computed as ``array``
    (``[1, C, H, W]`` or ``[C, H, W]``)."""
    from PIL import Image

    channels = _CHANNELS.get(color_space)
    if channels is None:
        raise Error(f"image output '{name}' has the color space {color_space}, which has no image form here")
    values = np.asarray(array)
    if values.ndim == 4 and values.shape[0] == 1:
        values = values[0]
    if values.ndim != 3 or values.shape[0] != channels:
        raise Error(f"image output '{name}' is {color_space}, an image of {channels} channel(s), but the model "
                    f"computed an array of shape {list(np.shape(array))}; an image needs [1, {channels}, H, W]")
    if color_space == "GRAYSCALE_FLOAT16":
        # A half-float buffer: the values rounded to fp16, handed out as float32 ("F").
        return Image.fromarray(np.ascontiguousarray(values[0].astype(np.float16).astype(np.float32)))
    whole_pixel = (values >= 0) & (values <= 255) & (np.floor(values) == values)  # NaN fails every test
    if not whole_pixel.all():
        where = tuple(int(i) for i in np.argwhere(~whole_pixel)[0])
        raise Error(f"image output '{name}' holds {float(values[where])!r} at [c, h, w] = {list(where)}: an 8-bit "
                    "pixel holds a whole number from 0 to 255, and how Core ML rounds or clamps other values is "
                    "not specified, so coremlrt makes no image of it (coremlrt.MLModel returns the array)")
    pixels = values.astype(np.uint8)
    if channels == 1:
        return Image.fromarray(np.ascontiguousarray(pixels[0]))  # mode "L"
    rgb = pixels if color_space == "RGB" else pixels[::-1]
    alpha = np.full((1,) + rgb.shape[1:], 255, dtype=np.uint8)
    return Image.fromarray(np.ascontiguousarray(np.concatenate([rgb, alpha]).transpose(1, 2, 0)))  # "RGBA"
