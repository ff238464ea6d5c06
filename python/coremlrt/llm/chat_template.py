"""Chat templates: the Jinja2 template of a tokenizer_config.json rendered with the variables
transformers gives it (``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``,
``raise_exception``, ``strftime_now``, a ``tojson`` filter), in a sandbox: a template comes
with a downloaded model and is untrusted."""

import datetime
import functools
import json

from .._core import Error


class TemplateError(Error):
    pass


@functools.lru_cache(maxsize=16)
def _compile(template):
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:
        raise ImportError(f"chat templates need jinja2: pip install 'coremlrt[llm]' ({exc})") from None

    def raise_exception(message):
        raise TemplateError(f"the chat template refused the messages: {message}")

    def tojson(value, indent=None, ensure_ascii=False, sort_keys=False):
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template)


def render(template, messages, add_generation_prompt=True, **variables):
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise Error("messages must be a list of {'role': ..., 'content': ...} objects")
    try:
        return _compile(template).render(messages=messages, add_generation_prompt=add_generation_prompt, **variables)
    except TemplateError:
        raise
    except Exception as exc:  # noqa: BLE001 - jinja2's errors: a bad template or a sandbox refusal
        raise Error(f"the chat template failed: {type(exc).__name__}: {exc}") from None
