"""Tiny random-weight chat checkpoints written to disk, for tests, demos and benchmarks of the app wing.

A checkpoint here is a real one as far as loading goes: a config, a `tokenizers` word-level tokenizer over a small
fixed vocabulary with Gemma3's special tokens (the demo tokenizer), an image processor sized to the tiny vision tower
and a processor with a Gemma-style chat template, all written with `save_pretrained` and read back with
`from_pretrained`.

- `write_chat_checkpoint`: any tiny model class and config on the demo tokenizer (`vlmprep demo` writes its Gemma3);
- `build_llava_checkpoint`: a LLaVA, causal everywhere (no bidirectional image block), so transformers'
  continuous-batching engine runs its image requests exactly; the serving tests and benchmarks use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "DEMO_CHAT_TEMPLATE",
    "DEMO_WORDS",
    "LLAVA_CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "adopt_demo_tokenizer",
    "build_demo_tokenizer",
    "build_llava_checkpoint",
    "gemma_chat_template",
    "save_chat_checkpoint",
    "write_chat_checkpoint",
]

SPECIAL_TOKENS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
]
# A small fixed vocabulary: every word of the scripted chat, plus enough others that random weights "speak" words.
_WORDS = """
a an the this that these those it its is are was be do does you i we they me my your what which how why where when
here there and or but not no yes so because than as of in on at with from to for by about like more most less very
quite only also just then first second one two three both same different another other picture pictures image images
photo color colors see look looks show shows describe compare think tell red blue green yellow orange purple black
white gray dark light bright soft sky sea sun moon cloud tree grass house road car cat dog bird flower left right top
bottom middle center corner edge small large big round square line lines circle circles stripe stripes pattern
gradient shape shapes noise smooth sharp warm cool nice good
"""
DEMO_WORDS = ["\n", *".,?!':", *_WORDS.split()]


def gemma_chat_template(item_placeholders: dict[str, str]) -> str:
    """A Gemma-style chat template: one `<start_of_turn>role\n...<end_of_turn>\n` per message, each item of a
    content list written as its type's placeholder (which the processor expands), each text trimmed.

    Args:
        item_placeholders (`dict[str, str]`): the placeholder of each item type, e.g. `{"image": "<start_of_image>"}`.

    Returns:
        `str`: the Jinja template.
    """
    items = "".join(
        f"{{%- {'if' if index == 0 else 'elif'} item['type'] == '{kind}' -%}}{{{{ '{placeholder}' }}}}"
        for index, (kind, placeholder) in enumerate(item_placeholders.items())
    )
    return (
        "{{ bos_token }}"
        "{%- for message in messages -%}"
        "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
        "{{ '<start_of_turn>' + role + '\n' }}"
        "{%- if message['content'] is string -%}"
        "{{ message['content'] | trim }}"
        "{%- else -%}"
        "{%- for item in message['content'] -%}"
        f"{items}"
        "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- endif -%}"
        "{{ '<end_of_turn>\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
    )


# Each image is a single `<start_of_image>` that Gemma3Processor expands to the full image sequence.
DEMO_CHAT_TEMPLATE = gemma_chat_template({"image": "<start_of_image>"})


def build_demo_tokenizer(named_tokens: dict[str, str] | None = None, unnamed_tokens: Sequence[str] = ()):
    """A word-level fast tokenizer over `DEMO_WORDS` with Gemma3's special tokens and the attributes a processor reads

    Args:
        named_tokens (`dict[str, str]`, *optional*):
            More special tokens after the demo vocabulary, each also an attribute (`{"audio_token": "<audio>"}`).
        unnamed_tokens (`Sequence[str]`, *optional*): more special tokens after those, without an attribute.

    Returns:
        `transformers.PreTrainedTokenizerFast`: with `boi_token`, `eoi_token`, `image_token` and `named_tokens` (and
        their `_id`s).
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *dict.fromkeys(DEMO_WORDS)])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[^\S\n]+"), behavior="removed"),  # spaces go, newlines stay tokens
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    backend.add_special_tokens(SPECIAL_TOKENS)  # never split, dropped by `skip_special_tokens`
    named_tokens = named_tokens or {}
    if named_tokens or unnamed_tokens:
        backend.add_special_tokens([*named_tokens.values(), *unnamed_tokens])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
            **named_tokens,
        },
    )


def adopt_demo_tokenizer(config, tokenizer):
    """Give a tiny config the vocabulary, special token ids and image placeholders of the demo tokenizer (in place).

    Args:
        config (`PreTrainedConfig`): a tiny image-text config from `vlmprep.testing`.
        tokenizer (`PreTrainedTokenizerFast`): from `build_demo_tokenizer`.

    Returns:
        `PreTrainedConfig`: `config`.
    """
    text = config.text_config
    text.vocab_size = len(tokenizer)
    text.pad_token_id, text.bos_token_id, text.eos_token_id = (
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
    )
    config.image_token_id = tokenizer.image_token_id
    if hasattr(config, "boi_token_id"):  # Gemma3's image start and end (its `*_token_index` fields)
        config.boi_token_id = tokenizer.boi_token_id
        config.eoi_token_id = tokenizer.eoi_token_id
    return config


def write_chat_checkpoint(
    directory: str | os.PathLike, model_class: type, config, build_processor: Callable, seed: int = 0
) -> Path:
    """Save a random-weight model on the demo tokenizer with its processor; answers end at the end of a chat turn.

    `config` gets the demo tokenizer's vocabulary and special token ids (`adopt_demo_tokenizer`). The weights are
    `vlmprep.testing.tiny_model`'s: random, with the images reaching the logits (upstream's init zeroes some
    projectors, Gemma3's among them), so a "same answer" check on images can fail; the caller's random state is left
    as it was.

    Args:
        directory (`str` or `os.PathLike`): where to write; created (with parents) when missing.
        model_class (`type`): the transformers model class.
        config (`PreTrainedConfig`): its tiny config, from `vlmprep.testing` (changed in place).
        build_processor (`Callable[[PreTrainedConfig, PreTrainedTokenizerFast], ProcessorMixin]`):
            The processor of the adopted config on the demo tokenizer: an image processor sized to its vision tower,
            a chat template.
        seed (`int`, *optional*, defaults to 0): seed of the random weights.

    Returns:
        `Path`: `directory`.
    """
    from .weights import tiny_model

    tokenizer = build_demo_tokenizer()
    config = adopt_demo_tokenizer(config, tokenizer)
    processor = build_processor(config, tokenizer)
    model = tiny_model(model_class, config, seed=seed)
    return save_chat_checkpoint(directory, model, processor, tokenizer)


def save_chat_checkpoint(directory: str | os.PathLike, model, processor, tokenizer) -> Path:
    """Save a model and its processor to `directory` (created with parents), its answers ending at the end of a chat
    turn or at EOS.

    Args:
        directory (`str` or `os.PathLike`): where to write.
        model (`PreTrainedModel`): the model, on `tokenizer`'s ids.
        processor (`ProcessorMixin`): its processor.
        tokenizer (`PreTrainedTokenizerFast`): from `build_demo_tokenizer`.

    Returns:
        `Path`: `directory`.
    """
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end_of_turn]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


# The demo template's image item becomes LLaVA's placeholder, which `LlavaProcessor` expands to one token per feature.
LLAVA_CHAT_TEMPLATE = gemma_chat_template({"image": "<image_soft_token>"})


def build_llava_checkpoint(directory: str | os.PathLike, seed: int = 0) -> Path:
    """Write a tiny image-sensitive LLaVA checkpoint (model, tokenizer, image processor, processor) to `directory`.

    Args:
        directory (`str` or `os.PathLike`): where to write; created (with parents) when missing.
        seed (`int`, *optional*, defaults to 0): seed of the random weights.

    Returns:
        `Path`: `directory`.
    """
    import transformers

    from .configs import tiny_llava_config

    model_class = transformers.LlavaForConditionalGeneration
    return write_chat_checkpoint(directory, model_class, tiny_llava_config(), _llava_processor, seed)


def _llava_processor(config, tokenizer):
    from transformers import CLIPImageProcessor, LlavaProcessor

    vision = config.vision_config
    size = {"height": vision.image_size, "width": vision.image_size}
    return LlavaProcessor(
        image_processor=CLIPImageProcessor(size=size, crop_size=size, do_center_crop=False),
        tokenizer=tokenizer,
        chat_template=LLAVA_CHAT_TEMPLATE,
        patch_size=vision.patch_size,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        num_additional_image_tokens=1,  # CLIP's class token, which the "default" strategy drops
        image_token=tokenizer.image_token,
    )
