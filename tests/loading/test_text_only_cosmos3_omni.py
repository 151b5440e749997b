"""Cosmos3 Omni's text-only rule on the names of a unified checkpoint (the reasoner's decoder next to the generator's
weights), which `save_pretrained` of a tiny reasoner does not write."""

from vlmprep.models.text_only_rules import COSMOS3_OMNI_DECODER


def test_unified_checkpoint_names_map_to_the_qwen3_decoder():
    assert (
        COSMOS3_OMNI_DECODER.decoder_key("layers.0.self_attn.to_q.weight") == "model.layers.0.self_attn.q_proj.weight"
    )
    assert COSMOS3_OMNI_DECODER.decoder_key("layers.1.self_attn.norm_k.weight") == (
        "model.layers.1.self_attn.k_norm.weight"
    )
    assert COSMOS3_OMNI_DECODER.decoder_key("embed_tokens.weight") == "model.embed_tokens.weight"
    assert COSMOS3_OMNI_DECODER.decoder_key("norm.weight") == "model.norm.weight"
    assert COSMOS3_OMNI_DECODER.decoder_key("lm_head.weight") == "lm_head.weight"
    # Module names, as a checkpoint saved without the conversion mapping has them
    assert COSMOS3_OMNI_DECODER.decoder_key("model.language_model.layers.0.mlp.up_proj.weight") == (
        "model.layers.0.mlp.up_proj.weight"
    )


def test_generator_and_tower_weights_are_never_read():
    for key in (
        "layers.0.self_attn.add_q_proj.weight",
        "layers.0.self_attn.to_add_out.weight",
        "layers.0.self_attn.norm_added_k.weight",
        "layers.0.moe_gen.experts.0.weight",
        "blocks.0.attn.qkv.weight",
        "merger.linear_fc1.weight",
        "model.visual.blocks.0.attn.qkv.weight",
        "proj_out.weight",
        "time_embedder.linear_1.weight",
    ):
        assert COSMOS3_OMNI_DECODER.decoder_key(key) is None, key
