"""Tiny random models of each architecture lowbit runs, built by transformers from a config
(AutoModelForCausalLM.from_config, seeded), with transformers' own fp32 logits as the reference.

    --write     writes tests/data/architectures/<name>/{config.json, model.safetensors, reference.json}
                (every fixture, or those named after --write):
                the fixtures `make test` checks without Python (lowbit's logits within 1e-4 of the
                logit scale). Weights are rounded to bf16 and stored as bf16, so the files stay small
                and the fp32 reference is computed from exactly the stored values.
    (default)   rebuilds every fixture with the pinned transformers in a temp folder and checks its
                reference logits equal the committed ones (the library still computes the same); then
                exports each fixture to GGUF F32 with lowbit (a 96-token byte-level tokenizer.json
                beside it, as llama.cpp needs a vocabulary) and checks llama.cpp's logits on the same
                tokens against transformers' (llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3, granite,
                smollm3, olmo2, ernie4_5, glm4, chatglm, command-r, cohere2, hunyuan-dense, qwen2vl, qwen3vl, mistral3,
                minimax-m2 and olmoe architectures in
                llama.cpp, its llama-with-experts, qwen2moe, qwen3moe, glm4moe and hunyuan-moe, deepseek2 (GLM-4.7-Flash
                too), and deepseek2 and gpt-oss
                on DeepSeek-V2/V3 and GPT-OSS variants of the fixtures that llama.cpp can express: lowbit must also read
                those files back to llama.cpp's logits, and convert them back to Hugging Face folders that
                transformers runs to the fixture's logits); and exports
                the mixtures of experts, Phi-3 (fused qkv_proj / gate_up_proj), DeepSeek-V2/V3 (latent
                attention), Granite (its multipliers), SmolLM3 (NoPE layers), OLMo 2 (output norms), ERNIE 4.5 (adjacent RoPE pairs) GLM / GLM-4 (fused gate_up_proj, partial
                adjacent RoPE) and Cohere / Cohere2 (LayerNorm, parallel blocks) to compressed-tensors and checks transformers' logits on that folder against lowbit's; and
                GPT-OSS's experts as released (MXFP4 blocks) in transformers and in lowbit.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

sys.path.insert(0, os.path.dirname(__file__))
from common import check, failures, print_table, run, scratch_folder  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "data", "architectures")
VOCAB, HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 96, 32, 64, 2, 4, 2
TOKENS = [1, 5, 17, 42, 9, 88, 3, 60, 60, 14, 95, 0, 33, 71, 2, 50]

COMMON = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
ARCHITECTURES = {
    # Llama 3.1-style rope scaling, tied embeddings (as Llama 3.2 1B/3B).
    "llama": ("llama", dict(rope_theta=500000.0, tie_word_embeddings=True,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "mistral": ("mistral", dict(rope_theta=1000000.0, tie_word_embeddings=False, sliding_window=4096)),
    "qwen2": ("qwen2", dict(rope_theta=1000000.0, tie_word_embeddings=False)),
    # Qwen3: q/k norms, head_dim decoupled from hidden_size / heads, no q/k/v bias.
    "qwen3": ("qwen3", dict(rope_theta=1000000.0, tie_word_embeddings=True, head_dim=16, attention_bias=False)),
    # Phi-3: fused qkv_proj / gate_up_proj, longrope (the long factors: 16 tokens are past the original
    # context of 8; attention factor from max/original = 32), partial rotary (Phi-4-mini). Its window is
    # Phi-3-mini-4k's: llama.cpp ignores Phi-3's window, so one the tokens reach could not be compared there
    # (Gemma 2 and 3 test sliding windows).
    "phi3": ("phi3", dict(tie_word_embeddings=False, sliding_window=2047, pad_token_id=0, original_max_position_embeddings=8,
                          rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                           "short_factor": [1.0, 1.5], "long_factor": [4.0, 8.0]})),
    # Gemma: GeGLU (tanh GELU), (1 + w) norms, embeddings scaled by sqrt(hidden), head_dim apart, tied.
    "gemma": ("gemma", dict(head_dim=16, hidden_activation="gelu_pytorch_tanh")),
    # Gemma 2: norms on the attention and MLP outputs, attention and final soft-capping (caps low enough
    # to bend these logits), local/global layers. (query_pre_attn_scalar = head_dim: llama.cpp does not read
    # it; architecture_fixture_test checks another scale through an equivalent model.)
    "gemma2": ("gemma2", dict(head_dim=16, sliding_window=6, attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
                              query_pre_attn_scalar=16)),
    # Gemma 3: q/k norms, a local RoPE base for sliding layers and linear scaling on the global ones.
    "gemma3": ("gemma3_text", dict(head_dim=16, sliding_window=6, query_pre_attn_scalar=16,
                                   layer_types=["sliding_attention", "full_attention"],
                                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                       "rope_theta": 1000000.0},
                                                    "sliding_attention": {"rope_type": "default",
                                                                          "rope_theta": 10000.0}})),
    # Mixtures of experts. Mixtral: 4 experts of intermediate_size, top 2, weights renormalized.
    "mixtral": ("mixtral", dict(rope_theta=1000000.0, tie_word_embeddings=False, num_local_experts=4,
                                num_experts_per_tok=2)),
    # MiniMax-M2 / M2.1 (230B-A10B): RMS norms over the whole q and k projections, RoPE on half of each head
    # (rotate-half, the released configs' rotary_dim), 4 Mixtral-style experts by sigmoid score plus a correction bias,
    # top 2 renormalized, in every layer.
    "minimax_m2": ("minimax_m2", dict(rope_theta=5000000.0, tie_word_embeddings=False, head_dim=16, num_local_experts=4,
                                      num_experts_per_tok=2, rotary_dim=8)),
    # OLMoE (OLMoE-1B-7B): Llama's pre-norms with RMS norms over the whole q and k projections (multi-head, as
    # released and as llama.cpp's olmoe needs), 4 experts of intermediate_size by softmax, top 2 not renormalized.
    "olmoe": ("olmoe", dict(rope_theta=10000.0, tie_word_embeddings=False, num_key_value_heads=HEADS, num_experts=4,
                            num_experts_per_tok=2)),
    # Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): q/k/v bias, a sigmoid-gated shared expert, top-k weights not
    # renormalized.
    "qwen2_moe": ("qwen2_moe", dict(rope_theta=1000000.0, tie_word_embeddings=False, num_experts=4,
                                    num_experts_per_tok=2, moe_intermediate_size=24,
                                    shared_expert_intermediate_size=40, norm_topk_prob=False)),
    # The same with layer 1 dense (mlp_only_layers), an MLP of intermediate_size (llama.cpp has no such layers).
    "qwen2_moe_dense": ("qwen2_moe", dict(rope_theta=1000000.0, tie_word_embeddings=False, num_experts=4,
                                          num_experts_per_tok=2, moe_intermediate_size=24,
                                          shared_expert_intermediate_size=40, norm_topk_prob=False,
                                          mlp_only_layers=[1])),
    # Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): q/k norms, 8 experts, top 2, renormalized.
    "qwen3_moe": ("qwen3_moe", dict(rope_theta=1000000.0, tie_word_embeddings=False, head_dim=16, num_experts=8,
                                    num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=True)),
    # DeepSeek-V3 (V3, R1, Kimi K2, Moonlight): multi-head latent attention (q through a rank-16 bottleneck, K/V
    # from one 16-wide latent plus a shared 8-wide rotary key, interleaved RoPE pairs, V heads of 12 against q/k heads
    # of 8 + 8), YaRN (attention factor and softmax scale from mscale / mscale_all_dim), layer 0 dense, then sigmoid
    # routing with a score-correction bias over 2 groups (1 kept), renormalized and scaled, and a shared expert.
    "deepseek_v3": ("deepseek_v3", dict(rope_theta=10000.0, tie_word_embeddings=False, q_lora_rank=16, kv_lora_rank=16,
                                        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=4,
                                        num_experts_per_tok=2, moe_intermediate_size=24, n_shared_experts=1,
                                        first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.5,
                                        norm_topk_prob=True, num_key_value_heads=HEADS,
                                        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 64, "beta_fast": 32,
                                                      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8})),
    # DeepSeek-V2 (V2-Lite, V2.5): q through a plain projection, softmax routing limited to the best group (by its
    # top expert), weights scaled but not renormalized, two shared experts.
    "deepseek_v2": ("deepseek_v2", dict(rope_theta=10000.0, tie_word_embeddings=False, q_lora_rank=None, kv_lora_rank=16,
                                        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=4,
                                        num_experts_per_tok=2, moe_intermediate_size=24, n_shared_experts=2,
                                        first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=1.5,
                                        topk_method="group_limited_greedy", num_key_value_heads=HEADS)),
    # GPT-OSS (gpt-oss-20b, 120b): q/k/v and o biases, attention sinks, alternate sliding layers, its YaRN (32 x
    # 4096 positions, ramp not truncated: at head_dim 8 that moves one frequency); every layer 4 experts with biases,
    # stored stacked, routed by a biased router's top 2 through a softmax over those 2, with the clamped SwiGLU
    # (limit 1 here, so the clamps bite).
    "gpt_oss": ("gpt_oss", dict(head_dim=8, tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2,
                                sliding_window=6, swiglu_limit=1.0, max_position_embeddings=131072,
                                rope_parameters={"rope_type": "yarn", "factor": 32.0,
                                                 "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                                                 "beta_slow": 1.0, "truncate": False, "rope_theta": 150000.0})),
    # Granite (IBM Granite 3.x): a Llama with multipliers on the embeddings, the attention scores (in place of
    # 1 / sqrt(head_dim)), each block's outputs before the residual add, and the logits (divided), tied.
    "granite": ("granite", dict(rope_theta=10000.0, tie_word_embeddings=True, attention_bias=False,
                                embedding_multiplier=12.0, attention_multiplier=0.25, residual_multiplier=0.22,
                                logits_scaling=8.0)),
    # Granite MoE (Granite 3.0 / 3.1 1B-A400M, 3B-A800M): Granite's multipliers over 4 experts stored stacked
    # (block_sparse_moe.input_linear [E, 2 x ffn, hidden], gate first), the top 2 by router logit weighted by the
    # softmax over those; the shared variant adds an ungated shared expert (shared_mlp, gate and up fused).
    "granitemoe": ("granitemoe", dict(rope_theta=10000.0, tie_word_embeddings=True, embedding_multiplier=12.0,
                                      attention_multiplier=0.25, residual_multiplier=0.22, logits_scaling=8.0,
                                      num_local_experts=4, num_experts_per_tok=2, intermediate_size=24)),

    # SmolLM3: a Llama whose every fourth layer takes no RoPE (no_rope_layers), here 4 layers so the last one is.
    "smollm3": ("smollm3", dict(rope_theta=10000.0, tie_word_embeddings=True, num_hidden_layers=4, pad_token_id=0,
                                no_rope_layers=[1, 1, 1, 0])),
    # OLMo 2: no norm before attention and MLP, RMS norms on their outputs, q and k normed over the whole projection.
    "olmo2": ("olmo2", dict(rope_theta=500000.0, tie_word_embeddings=False, pad_token_id=0)),
    # OLMo 3: OLMo 2 with sliding layers (here one of two; by default three of four).
    "olmo3": ("olmo3", dict(rope_theta=500000.0, tie_word_embeddings=False, pad_token_id=0, sliding_window=6,
                            layer_types=["sliding_attention", "full_attention"])),
    # EXAONE 4.0 1.2B: OLMo 2's output norms, per-head q/k norms, no window (every layer takes RoPE).
    "exaone4": ("exaone4", dict(rope_theta=1000000.0, tie_word_embeddings=True, pad_token_id=0, sliding_window=None,
                                layer_types=["full_attention", "full_attention"])),
    # EXAONE 4.0 32B: the same with sliding layers, the only ones that take RoPE (llama.cpp slides windows in 64-layer
    # models only, so this one is not exported to GGUF).
    "exaone4_swa": ("exaone4", dict(rope_theta=1000000.0, tie_word_embeddings=False, pad_token_id=0, sliding_window=6,
                                    layer_types=["sliding_attention", "full_attention"])),
    # Seed-OSS (ByteDance Seed-OSS-36B): a Llama with q/k/v biases (attention_bias) and no o_proj bias
    # (attention_out_bias), head_dim apart from hidden / heads.
    "seed_oss": ("seed_oss", dict(rope_theta=10000000.0, tie_word_embeddings=False, head_dim=16, pad_token_id=0,
                                  attention_bias=True, attention_out_bias=False)),
    # ERNIE 4.5 (0.3B): a Llama whose RoPE rotates adjacent pairs in its own checkpoints, tied.
    "ernie4_5": ("ernie4_5", dict(rope_theta=500000.0, tie_word_embeddings=True, head_dim=8, pad_token_id=0)),
    # ERNIE 4.5 MoE (21B-A3B, 300B-A47B): ERNIE's adjacent RoPE pairs; layer 0 dense (moe_layer_start_index), then 4
    # experts chosen by softmax scores plus a bias (moe_statics), top 2 renormalized, and one ungated shared expert.
    "ernie4_5_moe": ("ernie4_5_moe", dict(rope_theta=500000.0, tie_word_embeddings=False, head_dim=8, pad_token_id=0,
                                          moe_num_experts=4, moe_k=2, moe_intermediate_size=24, moe_num_shared_experts=1,
                                          moe_layer_start_index=1, moe_layer_interval=1)),
    # GLM-4 (GLM-4-9B-0414, GLM-Z1): RoPE on adjacent pairs of the first half of each head (partial_rotary_factor
    # 0.5, the default), q/k/v biases, gate and up fused in one gate_up_proj, Gemma 2's four norms under its own
    # names (post_self_attn_layernorm, post_mlp_layernorm); heads wider than hidden / heads.
    "glm4": ("glm4", dict(rope_theta=10000.0, tie_word_embeddings=False, head_dim=16, pad_token_id=0)),
    # GLM (glm-4-9b-chat-hf): the same without the output norms; llama.cpp's chatglm needs heads x head_dim = hidden.
    "glm": ("glm", dict(rope_theta=10000.0, tie_word_embeddings=False, head_dim=HIDDEN // HEADS, pad_token_id=0)),
    # GLM-4.5 / 4.6 / 4.7 (Glm4MoeForCausalLM): rotate-half RoPE on half of each head, q/k/v biases, per-head q/k
    # norms; layer 0 dense, then DeepSeek-V3's routing (sigmoid, score-correction bias, renormalized, scaled) over 4
    # experts, top 2, with one ungated shared expert.
    "glm4_moe": ("glm4_moe", dict(rope_theta=10000.0, tie_word_embeddings=False, head_dim=16, pad_token_id=0,
                                  attention_bias=True, use_qk_norm=True, n_routed_experts=4, num_experts_per_tok=2,
                                  moe_intermediate_size=24, n_shared_experts=1, first_k_dense_replace=1,
                                  routed_scaling_factor=2.5, n_group=1, topk_group=1, norm_topk_prob=True)),
    # GLM-4.7-Flash (Glm4MoeLiteForCausalLM): DeepSeek-V3's latent attention and routing without rope scaling, dense
    # layers by mlp_layer_types (by default layer 0 alone), one shared expert.
    "glm4_moe_lite": ("glm4_moe_lite", dict(rope_theta=10000.0, tie_word_embeddings=False, q_lora_rank=16,
                                            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12,
                                            n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                            n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=1.8,
                                            norm_topk_prob=True, num_key_value_heads=HEADS, pad_token_id=0)),
    # HunYuan dense (Hunyuan-0.5B ... 7B): Llama with per-head q/k norms after RoPE, its NTK alpha RoPE base (over
    # head_dim 16, not hidden / heads), tied.
    "hunyuan_v1_dense": ("hunyuan_v1_dense", dict(tie_word_embeddings=True, head_dim=16, pad_token_id=0, eod_token_id=2,
                                                  rope_parameters={"rope_type": "dynamic", "alpha": 1000.0,
                                                                   "factor": 1.0, "rope_theta": 10000.0})),
    # HunYuan-A13B: the same attention; in every layer 4 experts of intermediate_size, top 2 by softmax, renormalized,
    # beside an ungated shared MLP; untied.
    "hunyuan_v1_moe": ("hunyuan_v1_moe", dict(tie_word_embeddings=False, head_dim=16, pad_token_id=0, eod_token_id=2,
                                              num_experts=4, moe_topk=2,
                                              rope_parameters={"rope_type": "dynamic", "alpha": 1000.0,
                                                               "factor": 1.0, "rope_theta": 10000.0})),
    # Cohere (Command R, Aya): LayerNorm without a bias, attention and MLP in parallel on one input norm, RoPE on
    # adjacent pairs, logits multiplied by logit_scale (0.5 here, not the default), tied.
    "cohere": ("cohere", dict(rope_theta=10000.0, logit_scale=0.5, layer_norm_eps=1e-5, pad_token_id=0)),
    # Command R+: per-head LayerNorms of q and k, each head with its own weights (llama.cpp reads them only in
    # models of 64 layers or more, so this one is not exported to GGUF).
    "cohere_qk_norm": ("cohere", dict(rope_theta=10000.0, logit_scale=0.5, layer_norm_eps=1e-5, pad_token_id=0,
                                      use_qk_norm=True)),
    # Cohere2 (Command R7B, Command A): the same with sliding layers, the only ones that take RoPE.
    "cohere2": ("cohere2", dict(rope_theta=10000.0, logit_scale=0.5, layer_norm_eps=1e-5, pad_token_id=0,
                                sliding_window=6, layer_types=["sliding_attention", "full_attention"])),
    # Llama 4 (the language model of Scout / Maverick, Llama4ForCausalLM): RoPE on adjacent pairs with Llama 3
    # scaling, every fourth layer (here the last) without RoPE, attending to the whole context with its query's
    # temperature tuned by position, the others attending within chunks with their q and k heads RMS-normed (no
    # weights) after RoPE; chunks and the temperature's floor 4 positions here (8192 as released) so both bite
    # within the 16 tokens. Every second layer sparse (Maverick's interleave): 4 experts stored stacked (gate_up_proj
    # [E, hidden, 2 x ffn], x W), the best by router logit weighted by its sigmoid on the expert's input, beside an
    # ungated shared expert; the dense layers twice as wide (intermediate_size_mlp).
    "llama4": ("llama4_text", dict(tie_word_embeddings=False, head_dim=8, intermediate_size=24, intermediate_size_mlp=48,
                                   num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=1,
                                   interleave_moe_layer_step=2, attention_chunk_size=4, floor_scale=4, attn_scale=0.1,
                                   pad_token_id=0,
                                   rope_parameters={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                                                    "rope_theta": 500000.0})),
}
ARCHITECTURES["granitemoeshared"] = ("granitemoeshared", {**ARCHITECTURES["granitemoe"][1], "shared_intermediate_size": 40})
# Granite 4.0 Micro: GraniteMoeHybridForCausalLM with attention layers only, RoPE, no experts: its MLP is the
# shared_mlp (gate and up fused); its Mamba-2 fields must only be consistent.
ARCHITECTURES["granite4"] = ("granitemoehybrid", {**ARCHITECTURES["granitemoe"][1], "num_local_experts": 0,
                                                  "shared_intermediate_size": 48, "position_embedding_type": "rope",
                                                  "layer_types": ["attention"] * LAYERS, "mamba_n_heads": 2})
# Gemma 3 4B and up ship as image-text models: the language model inside Gemma3ForConditionalGeneration (under
# language_model.*), beside a SigLIP vision tower lowbit does not run. Here with a tiny vision tower; the text
# config is the gemma3 fixture's.
# Mistral Small 3.1 / 3.2 likewise: a Mistral (head_dim apart from hidden / heads, no window) inside
# Mistral3ForConditionalGeneration, beside a Pixtral vision tower. Each: the wrapper's model_type, the text
# model's (model_type, config), the wrapper's other fields.
# Qwen3-VL's multimodal RoPE (interleaved sections of each head) and a tiny vision encoder with DeepStack.
QWEN3_VL_ROPE = {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [4, 2, 2], "mrope_interleaved": True}
QWEN3_VL_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=HIDDEN, patch_size=16,
                       spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                       deepstack_visual_indexes=[0])
MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 4,
                   "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "llama_4_scaling_beta": 0.1}
GLM4V_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}
GLM4V_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=HIDDEN, patch_size=14,
                    spatial_merge_size=2, temporal_patch_size=2, image_size=28)
MULTIMODAL = {"gemma3mm": ("gemma3", ARCHITECTURES["gemma3"],
                           dict(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                   num_attention_heads=2, image_size=28, patch_size=14),
                                mm_tokens_per_image=4)),
              "mistral3mm": ("mistral3", ("mistral", dict(rope_theta=1000000000.0, tie_word_embeddings=False, head_dim=16,
                                                          sliding_window=None)),
                             dict(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                     num_attention_heads=2, head_dim=8, image_size=28, patch_size=14),
                                  tie_word_embeddings=False)),
              # Ministral 3 (3B / 8B / 14B) as released: Mistral3ForConditionalGeneration over a ministral3 language
              # model, whose query is scaled after RoPE by 1 + beta log(1 + floor(position / original context)): YaRN's
              # original context of 4 here, so the 16 tokens reach floor 3 (and the YaRN-scaled frequencies).
              "ministral3mm": ("mistral3", ("ministral3", dict(head_dim=16, tie_word_embeddings=True,
                                                               max_position_embeddings=16,
                                                               rope_parameters=MINISTRAL3_ROPE)),
                               dict(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                       num_attention_heads=2, head_dim=8, image_size=28, patch_size=14),
                                    tie_word_embeddings=True)),
              # Mistral Small 4 / Mistral Large 3 as released: the same wrapper over a mistral4, DeepSeek-V3's latent
              # attention (YaRN whose mscale and mscale_all_dim cancel) with Ministral 3's query temperature, layer 0
              # dense, then 4 experts chosen by softmax scores in the best of 2 groups (by their best two), top 2
              # renormalized, x1.5, one shared expert.
              "mistral4mm": ("mistral3", ("mistral4", dict(tie_word_embeddings=False, q_lora_rank=16, kv_lora_rank=16,
                                                           qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12,
                                                           n_routed_experts=4, num_experts_per_tok=2,
                                                           moe_intermediate_size=24, n_shared_experts=1,
                                                           first_k_dense_replace=1, n_group=2, topk_group=1,
                                                           routed_scaling_factor=1.5, norm_topk_prob=True,
                                                           num_key_value_heads=HEADS, max_position_embeddings=16,
                                                           rope_parameters={**MINISTRAL3_ROPE, "rope_theta": 10000.0})),
                             dict(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                     num_attention_heads=2, head_dim=8, image_size=28, patch_size=14),
                                  tie_word_embeddings=False)),
              # Llama 4 Scout / Maverick as released: Llama4ForConditionalGeneration, the language model under
              # language_model.model.* and language_model.lm_head beside a vision model.
              "llama4mm": ("llama4", ARCHITECTURES["llama4"],
                           dict(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                   num_attention_heads=2, image_size=28, patch_size=14,
                                                   vision_output_dim=16, projector_input_dim=16,
                                                   projector_output_dim=16, pixel_shuffle_ratio=0.5),
                                tie_word_embeddings=False)),
              # Qwen2.5-VL and Qwen3-VL: a Qwen2 (q/k/v biases) and a Qwen3 (q/k norms, head_dim 16) whose multimodal
              # RoPE gives every section the same position on text, beside a tiny vision encoder (Qwen3-VL's with
              # DeepStack, whose visual features join early layers only with images).
              "qwen2_5_vl": ("qwen2_5_vl", ("qwen2_5_vl_text", dict(rope_theta=1000000.0,
                                                                     rope_scaling={"type": "mrope",
                                                                                   "mrope_section": [2, 1, 1]})),
                             dict(vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                                                     out_hidden_size=HIDDEN, patch_size=14, spatial_merge_size=2,
                                                     temporal_patch_size=2, window_size=56, fullatt_block_indexes=[0]),
                                  tie_word_embeddings=False)),
              # GLM-4.1V / GLM-4.6V-Flash (Glm4vForConditionalGeneration) and GLM-4.5V / GLM-4.6V
              # (Glm4vMoeForConditionalGeneration): a GLM-4 and a GLM-4.5 (without q/k norms) whose multimodal RoPE on
              # the rotary half of each head is the plain RoPE on text.
              # (GLM-4V's attention heads are hidden / heads wide, whatever head_dim says: 2 heads of 16 here.)
              "glm4v": ("glm4v", ("glm4v_text", dict(num_attention_heads=2, num_key_value_heads=1,
                                                     rope_parameters=GLM4V_ROPE)),
                        dict(vision_config=GLM4V_VISION, tie_word_embeddings=False)),
              "glm4v_moe": ("glm4v_moe", ("glm4v_moe_text", dict(head_dim=16, rope_parameters=GLM4V_ROPE,
                                                                  attention_bias=True, n_routed_experts=4,
                                                                  num_experts_per_tok=2, moe_intermediate_size=24,
                                                                  n_shared_experts=1, first_k_dense_replace=1,
                                                                  routed_scaling_factor=2.5, n_group=1, topk_group=1,
                                                                  norm_topk_prob=True)),
                            dict(vision_config=GLM4V_VISION, tie_word_embeddings=False)),
              "qwen3_vl": ("qwen3_vl", ("qwen3_vl_text", dict(head_dim=16, rope_parameters=QWEN3_VL_ROPE)),
                           dict(vision_config=QWEN3_VL_VISION, tie_word_embeddings=True)),
              # Qwen3-VL-MoE (30B-A3B, 235B-A22B): Qwen3-MoE's language model (4 experts, top 2, always renormalized)
              # with its experts stacked (transformers 5 saves them as Linear weights, gate first; the Hub's are x W).
              "qwen3_vl_moe": ("qwen3_vl_moe", ("qwen3_vl_moe_text", dict(head_dim=16, num_experts=4, num_experts_per_tok=2,
                                                                       moe_intermediate_size=24,
                                                                       rope_parameters=QWEN3_VL_ROPE)),
                               dict(vision_config=QWEN3_VL_VISION, tie_word_embeddings=False))}
# PyTorch's SDPA has no soft-capping, and transformers' SDPA path drops it silently: Gemma 2's reference
# is the eager attention (as Google recommends running it).
EAGER = {"gemma2", "gpt_oss", "gpt_oss_gguf"}
# DeepSeek as llama.cpp's deepseek2 can run it, built beside the fixtures (not committed): llama.cpp takes YaRN's
# mscale equal to mscale_all_dim (as every released DeepSeek has them; the V3 fixture's 1.0 / 0.8 tests transformers'
# general formula, and lowbit refuses to export it) and scores expert groups by their best two experts (V2-Lite has
# no groups; the V2 fixture's group_limited_greedy exports with a warning).
GGUF_VARIANTS = {
    "deepseek_v3_gguf": ("deepseek_v3", {**ARCHITECTURES["deepseek_v3"][1],
                                         "rope_scaling": {**ARCHITECTURES["deepseek_v3"][1]["rope_scaling"], "mscale": 0.8}}),
    "deepseek_v2_gguf": ("deepseek_v2", {**ARCHITECTURES["deepseek_v2"][1], "topk_method": "greedy", "n_group": 1,
                                         "topk_group": 1}),
    # llama.cpp's gpt-oss clamps at its constant 7 and always truncates YaRN's ramp.
    "gpt_oss_gguf": ("gpt_oss", {**ARCHITECTURES["gpt_oss"][1], "swiglu_limit": 7.0,
                                 "rope_parameters": {**ARCHITECTURES["gpt_oss"][1]["rope_parameters"], "truncate": True}}),
    # llama.cpp's llama4 chunks attention and tunes the temperature at its constant 8192 positions (as released).
    "llama4_gguf": ("llama4_text", {**ARCHITECTURES["llama4"][1], "attention_chunk_size": 8192, "floor_scale": 8192}),
}
# The ones lowbit exports to GGUF, checked in llama.cpp.
GGUF_ARCHITECTURES = ["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "gemma3mm",
                      "mistral3mm", "mixtral", "qwen2_moe", "qwen3_moe", "granite", "smollm3", "olmo2", "olmo3",
                      "exaone4", "seed_oss", "ernie4_5", "ernie4_5_moe", "glm4", "glm", "glm4_moe", "glm4_moe_lite",
                      "hunyuan_v1_dense", "hunyuan_v1_moe", "cohere", "cohere2", "qwen2_5_vl", "qwen3_vl",
                      "qwen3_vl_moe", "glm4v", "glm4v_moe", "granitemoe", "granitemoeshared", "granite4", "ministral3mm",
                      "mistral4mm", "minimax_m2", "olmoe", *GGUF_VARIANTS]


def build(name, folder):
    torch.manual_seed(1234)
    if name in MULTIMODAL:
        model_type, (text_type, text_extra), extra = MULTIMODAL[name]
        text = AutoConfig.for_model(text_type, **{**COMMON, **text_extra}).to_dict()
        config = AutoConfig.for_model(model_type, text_config=text, **extra)
        model = AutoModelForImageTextToText.from_config(config, torch_dtype=torch.float32).eval()
    else:
        model_type, extra = ARCHITECTURES[name] if name in ARCHITECTURES else GGUF_VARIANTS[name]
        config = AutoConfig.for_model(model_type, **{**COMMON, **extra})
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32,
                                                 attn_implementation="eager" if name in EAGER else "sdpa").eval()
    with torch.no_grad():
        for p in model.parameters():
            # Norm weights near 1 with some spread, so a wrong norm shows in the logits.
            p.copy_((torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.2) + (1.0 if p.dim() == 1 else 0.0))
                    .to(torch.bfloat16).to(torch.float32))
        for name_, b in model.named_buffers():  # DeepSeek-V3's routing bias: random, so a router ignoring it shows
            if name_.endswith("e_score_correction_bias"):
                b.copy_((torch.randn_like(b) * 0.3).to(torch.bfloat16).to(torch.float32))
        logits = model(torch.tensor([TOKENS])).logits[0].numpy()
    out = os.path.join(folder, name)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    for extra_file in ("generation_config.json",):
        if os.path.exists(os.path.join(out, extra_file)):
            os.remove(os.path.join(out, extra_file))
    reference = {"architecture": config.architectures[0], "tokens": TOKENS,
                 "note": "transformers fp32 logits at every position (weights are the stored bf16 values)",
                 "logits": [[round(float(v), 6) for v in row] for row in logits]}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f)
        f.write("\n")
    return out, logits


def byte_level_tokenizer(folder):
    """A tokenizer.json of VOCAB single-byte tokens (llama.cpp will not load a GGUF without a vocabulary)."""
    alphabet = [chr(b) for b in range(0x21, 0x21 + VOCAB)]
    data = {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(alphabet)}, "merges": []}}
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(data, f)


# llama-quantize's per-tensor choices for mixtures of experts (the router left F32, 8-expert models' attention
# bumped, ffn_*_exps quantized as 3-D tensors): lowbit's export of each type against llama_model_quantize on
# lowbit's F32 file, tensor by tensor. These rows (32 and 24 wide) are too short for K-quants, so the mixes
# also exercise llama-quantize's fallbacks.
MOE_MIX_CHECKS = {"mixtral", "qwen2_moe", "qwen3_moe", "glm4_moe", "ernie4_5_moe", "qwen3_vl_moe", "granitemoe",
                  "granitemoeshared", "mistral4mm", "minimax_m2", "olmoe",
                  *GGUF_VARIANTS}
MOE_MIX_TYPES = {"Q8_0": 7, "Q4_0": 2, "Q2_K": 10, "Q3_K_M": 12, "Q4_K_M": 15, "Q5_K_M": 17, "MXFP4_MOE": 38}
MOE_IMATRIX_TYPES = {"Q4_0", "Q4_K_M"}  # also with lowbit's imatrix, in both tools


def byte_text(folder):
    """A text of 4 x KL_CTX random tokens of the fixtures' byte vocabulary (no BOS, EOS or pad ids)."""
    path = os.path.join(folder, "byte-text.txt")
    if not os.path.exists(path):
        rng = np.random.default_rng(7)
        alphabet = [chr(b) for b in range(0x21, 0x21 + VOCAB)]
        with open(path, "w") as f:
            f.write("".join(alphabet[i] for i in rng.integers(3, VOCAB, size=4 * KL_CTX)))
    return path


def quantized_model_logits(path, quantization_config):
    """chunk -> transformers' fp64 logits of the quantized folder at `path`, decompressed with `quantization_config`.
    transformers 5 leaves the tensors its checkpoint conversion builds (Mixtral's fused experts and its router) in the
    decompressor's and the file's dtypes: everything runs in fp32."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, quantization_config=quantization_config).eval()
    model.float()

    def logits(chunk):
        with torch.no_grad():
            return model(torch.tensor([chunk])).logits[0].double().numpy()

    return logits


def kl_against_lowbit(lowbit, model_path, text, logits, label):
    """KL(engine || lowbit) on `model_path` over KL_CTX windows of `text`, the engine's logits from `logits`."""
    from common import lowbit_json, write_kl_base
    ids = lowbit_json(lowbit, "tokenize", "--model", model_path, "--file", text)["ids"]
    base = model_path + ".klbase"
    write_kl_base(base, ids, None, KL_CTX, KL_TOP_K, VOCAB, logits)  # the byte tokenizer adds no BOS
    agree = lowbit_json(lowbit, "ppl", "--model", model_path, "--text", text, "--ctx", str(KL_CTX), "--kl-base", base)["kl"]
    check(agree["top1_agreement"] >= 0.99, f"{label}: top-1 agreement {agree['top1_agreement']:.4f} < 0.99")
    return agree


def expert_weight(source, name, layer, e, proj):
    """Expert e's gate, up or down matrix [out, in] of block `layer` in fixture `name`'s tensors."""
    if name.startswith("gpt_oss"):  # stacked, x W: gate and up interleaved along the outputs
        p = f"model.layers.{layer}.mlp.experts."
        if proj == "down":
            return source[p + "down_proj"][e].T
        return source[p + "gate_up_proj"][e][:, 0 if proj == "gate" else 1::2].T
    if name.startswith("llama4"):  # stacked, x W: gate's outputs, then up's
        p = f"model.layers.{layer}.feed_forward.experts."
        if proj == "down":
            return source[p + "down_proj"][e].T
        half = source[p + "gate_up_proj"].shape[-1] // 2
        return source[p + "gate_up_proj"][e][:, :half].T if proj == "gate" else source[p + "gate_up_proj"][e][:, half:].T
    if name in ("qwen3_vl_moe", "mistral4mm"):  # stacked Linear weights, gate's outputs first
        p = f"{'language_model.model' if name == 'mistral4mm' else 'model.language_model'}.layers.{layer}.mlp.experts."
        if proj == "down":
            return source[p + "down_proj"][e]
        half = source[p + "gate_up_proj"].shape[1] // 2
        return source[p + "gate_up_proj"][e][:half] if proj == "gate" else source[p + "gate_up_proj"][e][half:]
    if name.startswith("granitemoe"):  # stacked Linear weights, gate's outputs first
        p = f"model.layers.{layer}.block_sparse_moe."
        if proj == "down":
            return source[p + "output_linear.weight"][e]
        half = source[p + "input_linear.weight"].shape[1] // 2
        return source[p + "input_linear.weight"][e][:half] if proj == "gate" else source[p + "input_linear.weight"][e][half:]
    if name in ("mixtral", "minimax_m2"):
        return source[f"model.layers.{layer}.block_sparse_moe.experts.{e}.{dict(gate='w1', up='w3', down='w2')[proj]}.weight"]
    return source[f"model.layers.{layer}.mlp.experts.{e}.{proj}_proj.weight"]


def check_moe_mixes(lowbit, folder, name, src, f32):
    import gguf
    from gguf_llamacpp import compare_tensors, quantize_llamacpp
    from gguf_llamacpp import read_imatrix_means
    rows = []
    text = byte_text(folder)
    # lowbit's importance matrix (the experts one matrix each, on their routed rows) used by both quantizers.
    imatrix = os.path.join(folder, f"{name}-imatrix.gguf")
    run(lowbit, "imatrix", src, "--calib", text, "-o", imatrix, "--ctx", str(KL_CTX))
    means = read_imatrix_means(imatrix)
    for t, ftype in MOE_MIX_TYPES.items():
        for with_imatrix in (False, True) if t in MOE_IMATRIX_TYPES else (False,):
            label = f"{t} + imatrix" if with_imatrix else t
            ours, theirs = os.path.join(folder, f"{name}-{t}.gguf"), os.path.join(folder, f"{name}-{t}-llamacpp.gguf")
            run(lowbit, "export", src, "-o", ours, "--type", t, "--name", f"fixture-{len(name)}",
                *(["--imatrix", imatrix] if with_imatrix else []))
            quantize_llamacpp(f32, theirs, ftype, False, means if with_imatrix else None)
            same, total = compare_tensors(ours, theirs, f"{name} {label}")
            rows.append([name, label, f"{same}/{total}"])
    # A calibrated file (GPTQ per expert onto the ggml grids): gguf-py (llama.cpp's reader) decodes each
    # ffn_*_exps tensor, and expert e's slice must be the source's expert e within quantization error. (Its
    # logits are not compared with llama.cpp's: on these tiny random routers llama.cpp's 8-bit activations
    # flip routes, so even the llama-quantize-identical Q8_0 files disagree by KL ~1e-3 there.)
    calibrated = os.path.join(folder, f"{name}-Q4_0-calibrated.gguf")
    run(lowbit, "export", src, "-o", calibrated, "--type", "Q4_0", "--calib", text, "--calib-samples", "8",
        "--calib-len", str(KL_CTX), "--name", f"fixture-{len(name)}")
    from safetensors.torch import load_file
    source = {k: v.float().numpy() for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    worst = 0.0
    for t in gguf.GGUFReader(calibrated).tensors:
        if "_exps" not in t.name or not t.name.endswith(".weight"):  # gpt-oss: its experts' biases too
            continue
        layer, proj = int(t.name.split(".")[1]), t.name.split(".")[2].split("_")[1]  # ffn_gate_exps -> gate
        deq = gguf.quants.dequantize(t.data, t.tensor_type)
        for e in range(deq.shape[0]):
            ref, other = (expert_weight(source, name, layer, i, proj) for i in (e, (e + 1) % deq.shape[0]))
            rel = float(np.linalg.norm(deq[e] - ref) / np.linalg.norm(ref))
            worst = max(worst, rel)
            check(rel < 0.2 and np.linalg.norm(deq[e] - other) > np.linalg.norm(deq[e] - ref),
                  f"{name}: {t.name} expert {e} is {rel:.3f} (relative) from the source's expert {e}")
    rows.append([name, "Q4_0 calibrated", f"each expert within {worst:.3f} (relative) of the source's"])
    return rows


# Mixtures of experts exported to compressed-tensors (W4A16, group 8: every expert its own Linear, the
# routers ignored) load in transformers + compressed-tensors, whose loader decompresses each expert and fuses
# them into transformers 5's expert tensors; Phi-3 goes out with its fused qkv_proj / gate_up_proj.
# transformers' logits must be lowbit's on the same folder (KL over windows of a text in the fixtures' byte
# vocabulary).
ENGINE_CHECKS = [(name, "int4:g8") for name in
                 ("mixtral", "minimax_m2", "olmoe", "qwen2_moe", "qwen2_moe_dense", "qwen3_moe", "phi3", "deepseek_v2",
                  "deepseek_v3", "granite", "smollm3", "olmo2", "olmo3", "exaone4", "exaone4_swa", "seed_oss", "ernie4_5",
                  "ernie4_5_moe", "glm4", "glm", "glm4_moe", "glm4_moe_lite", "hunyuan_v1_dense", "hunyuan_v1_moe", "cohere", "cohere_qk_norm",
                  "cohere2", "mistral3mm", "ministral3mm", "llama4", "llama4mm",
                  "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe", "granite4")]
# The mixtures of experts among them, whose routers stay unquantized.
ENGINE_MOE_CHECKS = {"mixtral", "minimax_m2", "olmoe", "qwen2_moe", "qwen2_moe_dense", "qwen3_moe", "deepseek_v2",
                     "deepseek_v3", "ernie4_5_moe", "glm4_moe", "glm4_moe_lite", "hunyuan_v1_moe", "llama4", "llama4mm",
                     "qwen3_vl_moe", "glm4v_moe"}
KL_CTX, KL_TOP_K = 32, 32


def check_engine_exports(lowbit, folder):
    from transformers import CompressedTensorsConfig
    text = byte_text(folder)
    rows = []
    for name, scheme in ENGINE_CHECKS:
        src = os.path.join(folder, f"{name}-{scheme}-ct-source")
        shutil.copytree(os.path.join(FIXTURES, name), src)
        byte_level_tokenizer(src)
        out = os.path.join(folder, f"{name}-{scheme}-ct")
        run(lowbit, "export", src, "-o", out, "--to", "compressed-tensors", "--scheme", scheme)
        ignore = json.load(open(os.path.join(out, "config.json")))["quantization_config"]["ignore"]
        if name in ENGINE_MOE_CHECKS:
            check(all(i == "lm_head" or i.endswith(("gate", "router", "gate.wg")) for i in ignore) and len(ignore) > 1,
                  f"{name}: compressed-tensors ignore list {ignore} should hold the routers")
        logits = quantized_model_logits(out, CompressedTensorsConfig(dequantize=True))
        agree = kl_against_lowbit(lowbit, out, text, logits, f"{name} {scheme} compressed-tensors in transformers")
        check(agree["kld_mean"] < 1e-6, f"{name} {scheme}: KL(transformers || lowbit) on the compressed-tensors export = "
                                        f"{agree['kld_mean']:.3g}, must be < 1e-6")
        rows.append([name, scheme, f"{agree['kld_mean']:.2e}", f"{agree['top1_agreement']:.4f}"])
    print_table(["fixture", "compressed-tensors export", "KL(transformers || lowbit)", "top-1 agreement"], rows)


FP4_MAGNITUDES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_blocks(w):
    """w [..., rows, cols] as MXFP4 the way openai/gpt-oss ships its experts: E2M1 codes two to a byte (element 2k in
    the low nibble), blocks [..., rows, cols / 32, 16], and one E8M0 exponent per 32, scales [..., rows, cols / 32]
    (the OCP MX shared exponent floor(log2 amax) - 2, nearest code)."""
    *lead, rows, cols = w.shape
    g = w.float().reshape(*lead, rows, cols // 32, 32)
    e = torch.floor(torch.log2(g.abs().amax(-1, keepdim=True).clamp_min(2.0 ** -126))) - 2
    v = (g / torch.exp2(e)).clamp(-6, 6)
    codes = ((v.abs().unsqueeze(-1) - FP4_MAGNITUDES).abs().argmin(-1) + 8 * (v < 0)).to(torch.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8), (e.squeeze(-1) + 127).to(torch.uint8)


def check_gpt_oss_mxfp4(lowbit, folder):
    """GPT-OSS as released: the fixture's experts as MXFP4 blocks under quant_method "mxfp4", loaded by transformers
    (dequantized on the CPU) and by lowbit (kept in MXFP4): the same logits."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import Mxfp4Config
    out = os.path.join(folder, "gpt_oss_mxfp4")
    os.makedirs(out)
    tensors = {}
    with safe_open(os.path.join(FIXTURES, "gpt_oss", "model.safetensors"), "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            if k.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):  # x W: outputs along the last axis
                tensors[k + "_blocks"], tensors[k + "_scales"] = mxfp4_blocks(t.transpose(1, 2).contiguous())
            else:
                tensors[k] = t
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(FIXTURES, "gpt_oss", "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    byte_level_tokenizer(out)
    logits = quantized_model_logits(out, Mxfp4Config(dequantize=True))
    agree = kl_against_lowbit(lowbit, out, byte_text(folder), logits, "gpt_oss MXFP4 in transformers")
    check(agree["kld_mean"] < 1e-6, f"gpt_oss MXFP4: KL(transformers || lowbit) = {agree['kld_mean']:.3g}, must be < 1e-6")
    print_table(["GPT-OSS experts as released (MXFP4 blocks)", "KL(transformers || lowbit)", "top-1 agreement"],
                [["gpt_oss", f"{agree['kld_mean']:.2e}", f"{agree['top1_agreement']:.4f}"]])


def check_llama_cpp(lowbit, folder):
    import llama_cpp
    from transformers import CompressedTensorsConfig
    rows, mix_rows = [], []
    for name in GGUF_ARCHITECTURES:
        origin = os.path.join(folder if name in GGUF_VARIANTS else FIXTURES, name)
        src = os.path.join(folder, f"{name}-gguf")
        shutil.copytree(origin, src)
        byte_level_tokenizer(src)
        gguf = os.path.join(folder, f"{name}.gguf")
        # general.name: llama.cpp gives a model named like "phi3" Phi-3's special-token attributes, looked up by
        # text ("</s>"), which this 96-byte vocabulary does not have.
        run(lowbit, "export", src, "-o", gguf, "--type", "F32", "--name", f"fixture-{len(name)}")
        # An F32 KV cache (llama.cpp defaults to F16, which alone moves logits by ~1e-3).
        llm = llama_cpp.Llama(model_path=gguf, n_ctx=64, n_batch=64, logits_all=True, verbose=False,
                              type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
        llm.eval(TOKENS)
        theirs = np.array(llm.scores[:len(TOKENS)], dtype=np.float64)
        with open(os.path.join(origin, "reference.json")) as f:
            reference = np.array(json.load(f)["logits"], dtype=np.float64)
        lowbit_kl, back_rel = "", ""
        if name in GGUF_VARIANTS:  # lowbit reads llama.cpp's deepseek2 and gpt-oss layouts back and runs them as llama.cpp does
            def llama_cpp_logits(chunk):
                llm.reset()
                llm.eval(chunk)
                return np.array(llm.scores[:len(chunk)], dtype=np.float64)

            agree = kl_against_lowbit(lowbit, gguf, byte_text(folder), llama_cpp_logits, f"{name} GGUF in lowbit")
            check(agree["kld_mean"] < 1e-6, f"{name}: KL(llama.cpp || lowbit) on the GGUF = {agree['kld_mean']:.3g}")
            lowbit_kl = f"{agree['kld_mean']:.2e}"
        if name.startswith("deepseek") or name == "ministral3mm":
            # The file back as a Hugging Face folder (DeepseekV2/V3ForCausalLM, kv_b_proj joined again;
            # Ministral3ForCausalLM, its YaRN and query temperature in rope_parameters) in transformers: exported to
            # compressed-tensors int8 from the GGUF and from the folder it came from, the two hold the same codes, so
            # transformers must run them alike (a config field it reads otherwise than the GGUF meant, mscale,
            # routing or the temperature, moves these logits by far more).
            logits = []
            for origin_of_export in (gguf, src):
                out = os.path.join(folder, f"{name}-int8-from-{os.path.basename(origin_of_export)}")
                run(lowbit, "export", origin_of_export, "-o", out, "--to", "compressed-tensors", "--scheme", "int8")
                logits.append(quantized_model_logits(out, CompressedTensorsConfig(dequantize=True))(TOKENS))
            rel_back = float(np.abs(logits[0] - logits[1]).max() / max(np.abs(logits[1]).max(), 1.0))
            check(rel_back < 1e-6, f"{name}: transformers on the folder converted back from lowbit's GGUF differs "
                                   f"from the same export of the source folder by {rel_back:.2e} of the logit scale")
            back_rel = f"{rel_back:.2e}"
        del llm
        rel = float(np.abs(theirs - reference).max() / max(np.abs(reference).max(), 1.0))
        # ggml's CPU GELU rounds its input to fp16 and reads an fp16 table (GGML_GELU_FP16 in ggml-cpu/vec.h),
        # about 1e-3 relative per activation, so llama.cpp's own Gemma is that far from transformers. A wrong
        # norm, scale or mask moves these logits by 0.1-1 of their scale.
        tolerance = 2e-3 if name.startswith("gemma") else 1e-4
        check(rel < tolerance, f"{name}: llama.cpp's logits on lowbit's GGUF differ from transformers' by {rel:.2e} of "
                               f"the logit scale (tolerance {tolerance:.0e})")
        rows.append([name, f"{rel:.2e}", f"{tolerance:.0e}", lowbit_kl, back_rel])
        if name in MOE_MIX_CHECKS:
            mix_rows.extend(check_moe_mixes(lowbit, folder, name, src, gguf))
    print_table(["fixture exported to GGUF F32", "llama.cpp vs transformers (max diff / max |logit|)", "tolerance",
                 "KL(llama.cpp || lowbit on the file)", "file back to HF, int8 in transformers vs the source's"], rows)
    print_table(["MoE fixture", "type", "tensors identical to llama-quantize's / agreement"], mix_rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lowbit", default="build/lowbit")
    ap.add_argument("--write", nargs="*", metavar="NAME")
    args = ap.parse_args()
    if args.write is not None:
        for name in args.write or [*ARCHITECTURES, *MULTIMODAL]:
            out, _ = build(name, FIXTURES)
            print(f"wrote {out}")
        return
    folder = scratch_folder("lowbit-arch-")
    rows = []
    for name in [*ARCHITECTURES, *MULTIMODAL]:
        _, logits = build(name, folder)
        with open(os.path.join(FIXTURES, name, "reference.json")) as f:
            committed = np.array(json.load(f)["logits"], dtype=np.float32)
        diff = float(np.abs(committed - logits).max())
        scale = float(np.abs(logits).max())
        check(diff <= 1e-5 * max(scale, 1.0), f"{name}: transformers' logits moved by {diff} from the committed fixture")
        rows.append([name, f"{scale:.3f}", f"{diff:.2e}"])
    print_table(["fixture", "max |logit|", "max diff to committed"], rows)
    for name in GGUF_VARIANTS:
        build(name, folder)
    check_llama_cpp(args.lowbit, folder)
    check_engine_exports(args.lowbit, folder)
    check_gpt_oss_mxfp4(args.lowbit, folder)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("hf_architectures: all checks passed")


if __name__ == "__main__":
    main()
