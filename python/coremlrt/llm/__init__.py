"""Language models: generate, score and serve stateful Core ML language models.

    from coremlrt.llm import LanguageModel
    lm = LanguageModel("model.mlpackage", tokenizer="tokenizer-folder")
    print(lm.generate("Once upon a time", max_new_tokens=32).text)
    for chunk in lm.stream("Once upon a time", temperature=0.8, top_p=0.9, seed=1):
        print(chunk.text, end="", flush=True)
    lm.loglikelihood("The capital of France is", " Paris")
    lm.perplexity(open("text.txt").read())

docs/guide/language-models.md says which layouts are recognised and how to convert, compress,
generate, score, serve and evaluate.
"""

from .generation import Chunk, Generation
from .layout import Layout
from .model import LanguageModel, Sequence
from .sampling import SamplingParams
from .scoring import Perplexity, TokenScores
from .tokenizer import Tokenizer

__all__ = ["Chunk", "Generation", "LanguageModel", "Layout", "Perplexity", "SamplingParams", "Sequence",
           "TokenScores", "Tokenizer", "generate", "load"]


def load(path, tokenizer=None, layout=None, **options):
    """``LanguageModel(path, tokenizer, layout, **options)``."""
    return LanguageModel(path, tokenizer=tokenizer, layout=layout, **options)


def generate(model, prompt, tokenizer=None, **options):
    """One-shot generation: `model` is a LanguageModel or a path (loaded for this call);
    returns a :class:`Generation`. Options as :meth:`LanguageModel.generate`."""
    if not isinstance(model, LanguageModel):
        model = LanguageModel(model, tokenizer=tokenizer)
    return model.generate(prompt, **options)
