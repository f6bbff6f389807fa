"""ctypes declarations of the public C API (include/h3s.h, h3s_model.h, h3s_sample.h) and the loaded library.

The library is the package's own libh3strict.so (built by `pip install .`), or the file named by the environment
variable H3STRICT_LIBRARY.  Every call that returns a status goes through `check`, which raises H3StrictError (or
H3StrictInputError for a refused argument) with the library's one-line message.
"""

import ctypes
import importlib.util
import os
import sys

# h3s_status
OK, ERR_INVALID, ERR_SHAPE, ERR_DTYPE, ERR_INDEX, ERR_NOMEM, ERR_IO, ERR_FORMAT, ERR_UNSUPPORTED, ERR_DEVICE, \
    ERR_MISMATCH = range(11)
# h3s_dtype
F64, F32, BF16, F16, I64, BOOL = range(6)
# h3s_backend_kind
BACKEND_CPU, BACKEND_GOLDEN, BACKEND_CUDA = 0, 1, 2
LOAD_OWN_WEIGHTS = 1
MAX_DIMS = 4


class H3StrictError(RuntimeError):
    """A call into the library failed; `status` is the h3s_status name, the message the library's."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class H3StrictInputError(H3StrictError, ValueError):
    """The library refused an argument (bad value, shape, dtype or index); nothing was written."""


class Tensor(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * MAX_DIMS),
                ("data", ctypes.c_void_p), ("owns_data", ctypes.c_int), ("device", ctypes.c_int)]


INPUT_NAMES = ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "timestep", "timestep_indices",
               "token_tags", "position_ids", "video_indices", "audio_indices", "text_indices", "attention_mask")


class Inputs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in INPUT_NAMES]


class Grads(ctypes.Structure):
    _fields_ = [("hidden_states", Tensor), ("audio_hidden_states", Tensor), ("encoder_hidden_states", Tensor),
                ("count", ctypes.c_int64), ("names", ctypes.POINTER(ctypes.c_char * 160)),
                ("params", ctypes.POINTER(Tensor)), ("block", Tensor)]


class Config(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "num_attention_heads", "attention_head_dim", "hidden_size", "num_layers", "num_refiner_layers", "ffn_dim",
        "in_channels", "audio_in_channels")] + [("patch_size", ctypes.c_int64 * 3)] + [
        (n, ctypes.c_int64) for n in ("text_dim", "freq_dim", "time_embed_hidden_dim", "time_embed_dim",
                                      "rope_freq_dim")] + [
        (n, ctypes.c_double) for n in ("rope_theta", "norm_eps", "qk_norm_eps", "final_norm_eps")]


class LayoutOpts(ctypes.Structure):
    _fields_ = [("text_tokens", ctypes.c_int64), ("frames", ctypes.c_int64), ("latent_height", ctypes.c_int64),
                ("latent_width", ctypes.c_int64), ("audio_latents", ctypes.c_int64), ("keyframe_first", ctypes.c_int),
                ("keyframe_last", ctypes.c_int), ("pad_to", ctypes.c_int64)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class TrajectoryOpts(ctypes.Structure):
    _fields_ = [("seeds", ctypes.POINTER(ctypes.c_uint64)), ("nseeds", ctypes.c_int64), ("steps", ctypes.c_int64),
                ("batch", ctypes.c_int64), ("backend", ctypes.c_int), ("layout", LayoutOpts),
                ("with_grad", ctypes.c_int), ("progress", PROGRESS_FN), ("progress_ctx", ctypes.c_void_p),
                ("request", ctypes.POINTER(Inputs)), ("condition_rows", ctypes.c_int64),
                ("shift_video", ctypes.c_float), ("shift_audio", ctypes.c_float),
                ("batch_inputs", ctypes.POINTER(Inputs))]


class TrajectoryTotals(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("comparisons", "differing", "gradient_comparisons",
                                               "gradient_differing", "steps_run")]


class Modulation(ctypes.Structure):
    _fields_ = [("table", ctypes.POINTER(Tensor)), ("index", ctypes.POINTER(Tensor)), ("shift_chunk", ctypes.c_int),
                ("scale_chunk", ctypes.c_int)]


class AttnMask(ctypes.Structure):
    _fields_ = [("doc", ctypes.POINTER(Tensor)), ("key_valid", ctypes.POINTER(Tensor))]


NODE_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Tensor), ctypes.c_int,
                             ctypes.c_int64)

_P = ctypes.c_void_p
_T = ctypes.POINTER(Tensor)
_SIGNATURES = {
    "h3s_last_error": (ctypes.c_char_p, []),
    "h3s_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "h3s_version": (ctypes.c_char_p, []),
    "h3s_tensor_free": (None, [ctypes.POINTER(Tensor)]),
    "h3s_set_num_threads": (None, [ctypes.c_int]),
    "h3s_get_num_threads": (ctypes.c_int, []),
    "h3s_grad_operands_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    "h3s_set_grad_operands": (ctypes.c_int, [ctypes.c_int]),
    "h3s_get_grad_operands": (ctypes.c_int, []),
    "h3s_free": (None, [_P]),
    "h3s_backend_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    "h3s_backend_check": (ctypes.c_int, [ctypes.c_int]),
    "h3s_backend_name": (ctypes.c_char_p, [ctypes.c_int]),
    "h3s_model_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_P)]),
    "h3s_model_free": (None, [_P]),
    "h3s_recompute_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    "h3s_model_set_recompute": (ctypes.c_int, [_P, ctypes.c_int]),
    "h3s_model_set_device_grads": (ctypes.c_int, [_P, ctypes.c_int]),
    "h3s_model_device_grads": (ctypes.c_int, [_P]),
    "h3s_model_set_deferred_backward": (ctypes.c_int, [_P, ctypes.c_int]),
    "h3s_model_deferred_backward": (ctypes.c_int, [_P]),
    "h3s_model_pending": (ctypes.c_int, [_P]),
    "h3s_model_finish": (ctypes.c_int, [_P]),
    "h3s_model_set_grad_dtype": (ctypes.c_int, [_P, ctypes.c_int]),
    "h3s_model_grad_dtype": (ctypes.c_int, [_P]),
    "h3s_model_recompute": (ctypes.c_int, [_P]),
    "h3s_model_live_bytes": (ctypes.c_int64, [_P]),
    "h3s_model_peak_bytes": (ctypes.c_int64, [_P]),
    "h3s_model_reset_peak_bytes": (None, [_P]),
    "h3s_model_config": (ctypes.POINTER(Config), [_P]),
    "h3s_model_param_count": (ctypes.c_int64, [_P]),
    "h3s_model_param": (ctypes.c_int, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(Tensor)]),
    "h3s_tape_free": (None, [_P]),
    "h3s_model_forward": (ctypes.c_int, [_P, ctypes.POINTER(Inputs), NODE_HOOK, _P, ctypes.POINTER(_P),
                                         ctypes.POINTER(Tensor), ctypes.POINTER(Tensor)]),
    "h3s_model_forward_into": (ctypes.c_int, [_P, ctypes.POINTER(Inputs), NODE_HOOK, _P, ctypes.POINTER(_P),
                                              ctypes.POINTER(Tensor), ctypes.POINTER(Tensor)]),
    "h3s_model_backward_select": (ctypes.c_int, [_P, _P, ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
                                                 ctypes.POINTER(ctypes.c_ubyte), NODE_HOOK, _P,
                                                 ctypes.POINTER(Grads)]),
    "h3s_grads_free": (None, [ctypes.POINTER(Grads)]),
    "h3s_inputs_read": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(Inputs)]),
    "h3s_inputs_free": (None, [ctypes.POINTER(Inputs)]),
    "h3s_inputs_seeded": (ctypes.c_int, [ctypes.POINTER(Config), ctypes.POINTER(LayoutOpts), ctypes.c_int64,
                                         ctypes.c_uint64, ctypes.c_float, ctypes.c_float, ctypes.POINTER(Inputs)]),
    "h3s_inputs_validate": (ctypes.c_int, [ctypes.POINTER(Config), ctypes.POINTER(Inputs), ctypes.POINTER(ctypes.c_int64)]),
    "h3s_weights_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "h3s_weights_free": (None, [_P]),
    "h3s_weights_config": (ctypes.POINTER(Config), [_P]),
    "h3s_layout_condition_rows": (ctypes.c_int64, [ctypes.POINTER(Inputs)]),
    "h3s_schedule_sigmas": (ctypes.c_int, [ctypes.c_int64, ctypes.c_float, _P, ctypes.POINTER(ctypes.c_int64)]),
    "h3s_schedule_timesteps": (ctypes.c_int, [_P, ctypes.c_int64, _P]),
    "h3s_euler_step": (None, [_P, _P, ctypes.c_int64, ctypes.c_float, ctypes.c_float, ctypes.c_float, _P]),
    "h3s_trajectory": (ctypes.c_int, [_P, ctypes.POINTER(TrajectoryOpts), ctypes.POINTER(_P),
                                      ctypes.POINTER(TrajectoryTotals)]),
    # the forward operators (include/h3s_ops.h)
    "h3s_linear_forward": (ctypes.c_int, [_T, _T, _T, _T]),
    "h3s_rmsnorm_forward": (ctypes.c_int, [_T, _T, ctypes.POINTER(Modulation), ctypes.c_double, _T]),
    "h3s_head_rmsnorm_forward": (ctypes.c_int, [_T, ctypes.c_int64, _T, ctypes.c_double, _T]),
    "h3s_rope_table": (ctypes.c_int, [_T, ctypes.c_int64, ctypes.c_double, _T, _T]),
    "h3s_rope_forward": (ctypes.c_int, [_T, ctypes.c_int64, _T, _T, _T]),
    "h3s_attention_forward": (ctypes.c_int, [_T, _T, _T, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(AttnMask),
                                             _T, _T]),
    "h3s_residual_forward": (ctypes.c_int, [_T, _T, _T, _T, ctypes.c_int, _T]),
    "h3s_swiglu_forward": (ctypes.c_int, [_T, _T]),
    "h3s_adaln_projection_forward": (ctypes.c_int, [_T, _T, _T, _T, _T]),
    "h3s_timestep_sinusoid_forward": (ctypes.c_int, [_T, ctypes.c_int64, _T]),
    "h3s_timestep_mlp_forward": (ctypes.c_int, [_T, _T, _T, _T, _T, _T, _T]),
    "h3s_final_norm_forward": (ctypes.c_int, [_T, _T, _T, _T, ctypes.c_double, _T]),
    "h3s_rows_scatter": (ctypes.c_int, [_T, _T, ctypes.c_int64, _T]),
    "h3s_rows_gather": (ctypes.c_int, [_T, _T, ctypes.c_int64, _T]),
    "h3s_tensor_copy": (ctypes.c_int, [_T, _T]),
    "h3s_device_synchronize": (ctypes.c_int, []),
    "h3s_device_stream": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
}


def _load():
    path = os.environ.get("H3STRICT_LIBRARY") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               "libh3strict.so")
    if not os.path.exists(path):
        raise ImportError(f"h3strict: the library {path} is missing (install the package with `pip install .` "
                          "from the source tree, or set H3STRICT_LIBRARY to a built libh3strict.so)")
    # torch before the library, when torch is installed: on the H200 machine the CUDA build of the library loaded
    # first made a later `import torch` abort the process ("free(): invalid pointer"; docs/RELIABILITY.md), while
    # loaded after torch it works
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is not None:
        try:
            import torch  # noqa: F401
        except Exception:  # noqa: BLE001 -- a broken torch is the binding's concern, not the library's
            pass
    lib = ctypes.CDLL(path)
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()
NULL_HOOK = ctypes.cast(None, NODE_HOOK)

_INPUT_ERRORS = {ERR_INVALID, ERR_SHAPE, ERR_DTYPE, ERR_INDEX}


def check(status):
    """Raise for a failed call, with the library's message."""
    if status != OK:
        name = lib.h3s_status_name(status).decode()
        msg = lib.h3s_last_error().decode(errors="replace") or name
        cls = H3StrictInputError if status in _INPUT_ERRORS else H3StrictError
        raise cls(name, f"{msg} [{name}]")


def version():
    return lib.h3s_version().decode()


def path_arg(name, path):
    """A path for the library: str (surrogate-escaped bytes included), bytes or os.PathLike, encoded as the OS
    does (os.fsencode); an embedded NUL is refused (C would stop reading there and open another file)."""
    try:
        raw = os.fsencode(path)
    except TypeError:
        raise TypeError(f"{name}: expected a str, bytes or os.PathLike path, got {type(path).__name__}") from None
    if b"\0" in raw:
        raise ValueError(f"{name}: embedded null byte in {path!r}")
    return raw
