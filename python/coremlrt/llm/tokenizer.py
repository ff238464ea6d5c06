"""Text <-> token ids from a Hugging Face ``tokenizer.json`` (the ``tokenizers`` package, the
``llm`` extra), with the special tokens and chat template of ``tokenizer_config.json``.

A model folder as transformers saves it holds both files (and often ``generation_config.json``,
whose ``eos_token_id`` adds stop tokens). Nothing is downloaded: give a path.
"""

import json
import os

from .._core import Error


def _token_text(value):
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class Tokenizer:
    """``Tokenizer(path)``: a folder holding tokenizer.json (and tokenizer_config.json), or the
    tokenizer.json file itself."""

    def __init__(self, path):
        try:
            from tokenizers import Tokenizer as _Tokenizer
        except ImportError as exc:
            raise ImportError(f"text prompts need the tokenizers package: pip install 'coremlrt[llm]' ({exc})") from None
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if not os.path.isfile(file):
            raise Error(f"no tokenizer.json at {path}")
        try:
            self._tokenizer = _Tokenizer.from_file(file)
        except Exception as exc:  # noqa: BLE001 - the library raises its own exception type
            raise Error(f"{file} is not a tokenizer.json the tokenizers package reads: {exc}") from None
        self.path = file
        config = _read_json(os.path.join(folder, "tokenizer_config.json"))
        generation = _read_json(os.path.join(folder, "generation_config.json"))
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.bos_id = self.token_id(self.bos_token)
        eos = [self.token_id(self.eos_token)]
        extra = generation.get("eos_token_id")
        eos += extra if isinstance(extra, list) else [extra]
        self.eos_ids = tuple(dict.fromkeys(i for i in eos if isinstance(i, int)))
        self.add_bos = bool(config.get("add_bos_token", False)) and self.bos_id is not None
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        self.chat_template = template
        self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        self.special_ids = frozenset(i for i, t in self._tokenizer.get_added_tokens_decoder().items()
                                     if getattr(t, "special", False))

    def token_id(self, token):
        return None if token is None else self._tokenizer.token_to_id(token)

    def encode(self, text, add_special_tokens=True):
        """Token ids of `text`; with `add_special_tokens`, those tokenizer.json's post-processor
        adds, and BOS first when tokenizer_config.json says ``add_bos_token``."""
        if not isinstance(text, str):
            raise Error(f"a prompt is a string or a list of token ids, not {type(text).__name__}")
        ids = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        if add_special_tokens and self.add_bos and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids, skip_special_tokens=True):
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id):
        """One token as text (for logprobs' token strings): its decoded bytes, else its raw form."""
        text = self._tokenizer.decode([int(token_id)], skip_special_tokens=False)
        if not text or "\ufffd" in text:
            return self._tokenizer.id_to_token(int(token_id)) or text
        return text

    def apply_chat_template(self, messages, add_generation_prompt=True, template=None):
        """The prompt text of a chat: the template of tokenizer_config.json (or `template`),
        rendered as transformers renders it."""
        from .chat_template import render

        template = template or self.chat_template
        if not template:
            raise Error(f"{os.path.dirname(self.path)}/tokenizer_config.json has no chat_template; chat needs one")
        return render(template, messages, add_generation_prompt=add_generation_prompt,
                      bos_token=self.bos_token or "", eos_token=self.eos_token or "")


def find_tokenizer(model_path):
    """The folder beside a model that holds tokenizer.json (the model's own folder), or None."""
    folder = os.path.dirname(os.path.abspath(os.path.expanduser(os.fspath(model_path)).rstrip("/" + os.sep)))
    return folder if os.path.isfile(os.path.join(folder, "tokenizer.json")) else None


def _read_json(path):
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as exc:
            raise Error(f"{path} is not valid JSON: {exc}") from None


class IncrementalText:
    """The text that each newly generated token adds, for streaming. Each step decodes a short
    window of the last tokens (so a step costs the same however long the text is): the text of
    the window's new tokens is what decoding them adds to the decoding of the window without
    them. Decoding starts a few tokens back because tokenizers decode the first token of a
    sequence differently (a SentencePiece word's leading space is dropped there). A trailing
    partial UTF-8 character (the replacement character) is held back until the token that
    completes it arrives."""

    _CONTEXT = 4

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids = []
        self._start = 0     # first token of the decoding window
        self._emitted = 0   # tokens whose text has been given out

    def add(self, token_id):
        self.ids.append(int(token_id))
        return self._delta(final=False)

    def rest(self):
        """The text not given out yet (at the end: a partial character too, as the replacement
        character)."""
        return self._delta(final=True)

    def _delta(self, final):
        before = self.tokenizer.decode(self.ids[self._start:self._emitted])
        text = self.tokenizer.decode(self.ids[self._start:])
        if text.endswith("\ufffd") and not final:
            return ""
        self._emitted = len(self.ids)
        self._start = max(0, self._emitted - self._CONTEXT)
        return text[len(before):]

    @property
    def text(self):
        return self.tokenizer.decode(self.ids)
