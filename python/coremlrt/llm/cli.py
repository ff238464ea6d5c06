"""``coremlrt generate`` and ``coremlrt score``: the language-model commands of coremlrt.cli."""

import json
import sys

from .._core import Error


def add_parsers(sub):
    generate = sub.add_parser("generate", help="generate text with a stateful language model",
                              description="Streams the continuation of a prompt to standard output "
                                          "(docs/guide/language-models.md).")
    generate.add_argument("model")
    source = generate.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text (needs a tokenizer)")
    source.add_argument("--prompt-ids", metavar="ID,ID,...", help="the prompt as comma-separated token ids")
    _add_model_options(generate)
    generate.add_argument("--max-new-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    generate.add_argument("--top-k", type=int, default=0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--repetition-penalty", type=float, default=1.0)
    generate.add_argument("--seed", type=int, default=None)
    generate.add_argument("--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)")
    generate.add_argument("--ignore-eos", action="store_true", help="do not stop at the end-of-sequence token")
    generate.add_argument("--ids", action="store_true", help="print the generated token ids, not text")
    score = sub.add_parser("score", help="perplexity of a text file under a language model (sliding window)")
    score.add_argument("model")
    score.add_argument("text", metavar="TEXT_FILE")
    _add_model_options(score)
    score.add_argument("--window", type=int, default=None, help="tokens per window (default: the cache length)")
    score.add_argument("--stride", type=int, default=None, help="new tokens scored per window (default: half)")
    score.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _add_model_options(parser):
    parser.add_argument("--tokenizer", default=None, metavar="PATH",
                        help="folder holding tokenizer.json (default: the model's folder, when it holds one)")
    parser.add_argument("--backend", default=None, help="auto (default), reference or a backend name")
    parser.add_argument("--threads", type=int, default=None, help="threads per prediction (default: every core)")


def load(args):
    from .model import LanguageModel
    from .tokenizer import find_tokenizer

    tokenizer = args.tokenizer or find_tokenizer(args.model)
    return LanguageModel(args.model, tokenizer=tokenizer, backend=args.backend, threads=args.threads)


def cmd_generate(args, out=None):
    out = out or sys.stdout
    lm = load(args)
    if args.prompt_ids is not None:
        try:
            prompt = [int(t) for t in args.prompt_ids.split(",") if t.strip()]
        except ValueError:
            raise Error(f"--prompt-ids takes comma-separated integers, got {args.prompt_ids!r}") from None
    else:
        prompt = args.prompt
    text_out = lm.tokenizer is not None and not args.ids
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, repetition_penalty=args.repetition_penalty, seed=args.seed, stop=args.stop,
                   ignore_eos=args.ignore_eos)
    ids = []
    for chunk in lm.stream(prompt, **options):
        if text_out:
            print(chunk.text, end="", file=out, flush=True)
        elif not chunk.stop_token:
            ids.append(chunk.token_id)
            print(chunk.token_id, end=" ", file=out, flush=True)
        finish = chunk.finish_reason
    print(file=out)
    print(f"[{finish}]", file=sys.stderr)
    return 0


def cmd_score(args, out=None):
    out = out or sys.stdout
    lm = load(args)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    result = lm.perplexity(text, window=args.window, stride=args.stride)
    if args.json:
        print(json.dumps({"perplexity": result.perplexity, "nll": result.nll, "tokens": result.tokens,
                          "windows": result.windows}), file=out)
    else:
        print(f"perplexity {result.perplexity:.4f} over {result.tokens} tokens ({result.windows} windows; "
              f"negative log-likelihood {result.nll:.4f})", file=out)
    return 0
