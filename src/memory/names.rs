//! Every tensor name the memory inventories and the runtimes use, in one place: the layer and
//! unit inventories list tensors under these names, and the runtime's tracked buffers carry the
//! same ones, so that a measured high-water mark can be compared with the inventory name by
//! name. The dotted prefix says which part of the model a tensor belongs to; `_fp32` marks fp32
//! tensors (bf16 otherwise).

// Parameters, gradients and optimizer state.

/// Token embedding table.
pub const EMBEDDING_WEIGHTS: &str = "embedding.weights";
/// Attention weights of one layer (W_qkv and W_o, or one device's shard).
pub const ATTN_WEIGHTS: &str = "attn.weights";
/// MLP weights of one layer (or one device's shard pair).
pub const MLP_WEIGHTS: &str = "mlp.weights";
/// Normalisation weights.
pub const NORM_WEIGHTS: &str = "norm.weights";
/// Output head (untied) weights.
pub const HEAD_WEIGHTS: &str = "head.weights";
/// fp32 main gradients.
pub const OPTIMIZER_MAIN_GRADS_FP32: &str = "optimizer.main_grads_fp32";
/// bf16 main gradients (`--grad-dtype bf16`).
pub const OPTIMIZER_MAIN_GRADS_BF16: &str = "optimizer.main_grads_bf16";
/// fp32 master weights and Adam moments.
pub const OPTIMIZER_ADAM_STATE_FP32: &str = "optimizer.adam_state_fp32";
/// fp32 Adam moments and 16-bit master-weight remainders (`--optimizer-dtype fp32-remainders`).
pub const OPTIMIZER_ADAM_STATE_FP32_REMAINDERS: &str = "optimizer.adam_state_fp32_remainders";
/// bf16 Adam moments, no master copy (`--optimizer-dtype bf16`).
pub const OPTIMIZER_ADAM_STATE_BF16: &str = "optimizer.adam_state_bf16";

// Stored activations (the layer template of Korthikanti et al., and METP's).

/// Token ids of the micro-batch.
pub const EMBEDDING_TOKEN_IDS: &str = "embedding.token_ids";
/// Embedding dropout mask.
pub const EMBEDDING_DROPOUT_MASK: &str = "embedding.dropout_mask";
/// Input of the first normalisation (the layer input).
pub const NORM_LN1_INPUT: &str = "norm.ln1_input";
/// Input of the second normalisation.
pub const NORM_LN2_INPUT: &str = "norm.ln2_input";
/// What eager RMSNorm's autograd keeps of the first norm that a fused norm does not
/// (`--layer-ops eager`): the FP32 copy of its input (the square's and the product's), 4 bytes
/// per element. It keeps the normalised bf16 values too (the weight product's) but not the bf16
/// input, which nothing saves: those 2 bytes are the norm input's entry, the same size.
pub const NORM_LN1_EAGER: &str = "norm.ln1_eager";
/// The same for the second norm.
pub const NORM_LN2_EAGER: &str = "norm.ln2_eager";
/// Input of the QKV projection.
pub const ATTN_QKV_INPUT: &str = "attn.qkv_input";
/// Attention input (METP: the local rows of the layer's attention input).
pub const ATTN_INPUT: &str = "attn.input";
/// Queries.
pub const ATTN_Q: &str = "attn.q";
/// Keys.
pub const ATTN_K: &str = "attn.k";
/// Values.
pub const ATTN_V: &str = "attn.v";
/// Q, K and V of every head group, stored (METP with stored Q/K/V).
pub const ATTN_QKV: &str = "attn.qkv";
/// Attention scores (unfused).
pub const ATTN_SCORES: &str = "attn.scores";
/// Softmax output (unfused).
pub const ATTN_SOFTMAX_OUT: &str = "attn.softmax_out";
/// Attention-probability dropout mask.
pub const ATTN_SOFTMAX_DROPOUT_MASK: &str = "attn.softmax_dropout_mask";
/// Attention probabilities after dropout.
pub const ATTN_SOFTMAX_DROPOUT_OUT: &str = "attn.softmax_dropout_out";
/// fp32 log-sum-exp of the attention rows.
pub const ATTN_LSE: &str = "attn.lse";
/// METP: the attention outputs of every head group on the local rows.
pub const ATTN_GROUP_OUTPUTS: &str = "attn.group_outputs";
/// Input of the output projection.
pub const ATTN_PROJ_INPUT: &str = "attn.proj_input";
/// Attention-output dropout mask.
pub const ATTN_OUT_DROPOUT_MASK: &str = "attn.out_dropout_mask";
/// METP: MLP input on the local rows.
pub const MLP_INPUT: &str = "mlp.input";
/// Input of the first MLP GEMM.
pub const MLP_FC1_INPUT: &str = "mlp.fc1_input";
/// Activation input (X·W1), stored.
pub const MLP_ACT_INPUT: &str = "mlp.act_input";
/// Input of the second MLP GEMM (the activation output).
pub const MLP_FC2_INPUT: &str = "mlp.fc2_input";
/// SwiGLU's silu output, which eager PyTorch's product keeps for the up projection's gradient
/// (`--layer-ops eager`; a fused `swiglu` recomputes it).
pub const MLP_SILU_OUTPUT: &str = "mlp.silu_output";
/// MLP-output dropout mask.
pub const MLP_OUT_DROPOUT_MASK: &str = "mlp.out_dropout_mask";
/// Input of the final normalisation.
pub const HEAD_FINAL_NORM_INPUT: &str = "head.final_norm_input";
/// Input of the output head.
pub const HEAD_INPUT: &str = "head.input";

// Transients.

/// The attention block's output being summed over head groups (forward).
pub const ATTN_OUTPUT_SUM: &str = "attn.output_sum";
/// A device's partial attention output before the all-reduce (TP).
pub const ATTN_OUTPUT_PARTIAL: &str = "attn.output_partial";
/// Q, K, V of one head group, recomputed.
pub const ATTN_QKV_GROUP: &str = "attn.qkv_group";
/// fp32 running output of one head group (online softmax).
pub const ATTN_OUTPUT_ACC_FP32: &str = "attn.output_acc_fp32";
/// Scores of one attention block (unfused).
pub const ATTN_BLOCK_SCORES: &str = "attn.block_scores";
/// fp32 log-sum-exp of one attention block (unfused).
pub const ATTN_BLOCK_LSE_FP32: &str = "attn.block_lse_fp32";
/// Probabilities of one attention block (unfused).
pub const ATTN_BLOCK_PROBS: &str = "attn.block_probs";
/// Output of one attention block (unfused).
pub const ATTN_BLOCK_OUT: &str = "attn.block_out";
/// Gradient of one block's probabilities (unfused backward).
pub const ATTN_BLOCK_GRAD_PROBS: &str = "attn.block_grad_probs";
/// Gradient of one block's scores (unfused backward).
pub const ATTN_BLOCK_GRAD_SCORES: &str = "attn.block_grad_scores";
/// Gradient of one head group's output (dO).
pub const ATTN_GRAD_GROUP_OUTPUT: &str = "attn.grad_group_output";
/// A device's gradient of its heads' output (TP).
pub const ATTN_GRAD_OUTPUT_LOCAL: &str = "attn.grad_output_local";
/// fp32 rowsum(dO ∘ O) per head.
pub const ATTN_DELTA_FP32: &str = "attn.delta_fp32";
/// fp32 dQ accumulator.
pub const ATTN_DQ_ACC_FP32: &str = "attn.dq_acc_fp32";
/// fp32 dK/dV accumulators of the device's own block.
pub const ATTN_DKV_ACC_FP32: &str = "attn.dkv_acc_fp32";
/// Gradient of the scores (unfused backward).
pub const ATTN_GRAD_SCORES: &str = "attn.grad_scores";
/// Gradient of the probabilities (unfused backward).
pub const ATTN_GRAD_PROBS: &str = "attn.grad_probs";
/// Full-length dK and dV (RSA backward).
pub const ATTN_GRAD_KV_FULL_LENGTH: &str = "attn.grad_kv_full_length";
/// Receive buffer of a head group's weight shard.
pub const ATTN_WEIGHT_RECV: &str = "attn.weight_recv";
/// A device's fp32 contribution to a head group's weight gradient.
pub const ATTN_WEIGHT_GRAD_CONTRIB_FP32: &str = "attn.weight_grad_contrib_fp32";
/// Receive buffer of a weight-gradient contribution (at the owner).
pub const ATTN_WEIGHT_GRAD_RECV_FP32: &str = "attn.weight_grad_recv_fp32";
/// The MLP block's output being summed over weight shards (forward).
pub const MLP_OUTPUT_SUM: &str = "mlp.output_sum";
/// A device's partial MLP output before the all-reduce (TP).
pub const MLP_OUTPUT_PARTIAL: &str = "mlp.output_partial";
/// Activation input of one weight shard, recomputed.
pub const MLP_ACT_INPUT_BLOCK: &str = "mlp.act_input_block";
/// Activation output of one weight shard.
pub const MLP_ACT_OUTPUT_BLOCK: &str = "mlp.act_output_block";
/// Receive buffer of a traveling MLP weight-shard pair.
pub const MLP_WEIGHT_RECV: &str = "mlp.weight_recv";
/// fp32 gradient accumulator of the device's own MLP shard pair.
pub const MLP_WEIGHT_GRAD_ACC_FP32: &str = "mlp.weight_grad_acc_fp32";
/// Receive buffer of a traveling fp32 MLP gradient accumulator.
pub const MLP_WEIGHT_GRAD_RECV_FP32: &str = "mlp.weight_grad_recv_fp32";
/// Gradient of the block's output.
pub const GRAD_LAYER_OUTPUT: &str = "grad.layer_output";
/// Gradient of the block's input.
pub const GRAD_LAYER_INPUT: &str = "grad.layer_input";
/// Gradient of Q, K and V.
pub const GRAD_QKV: &str = "grad.qkv";
/// Gradient of one head group's Q, K and V.
pub const GRAD_QKV_GROUP: &str = "grad.qkv_group";
/// Gradient of the activation input.
pub const GRAD_MLP_ACT: &str = "grad.mlp_act";
/// Gradient of one weight shard's activation input.
pub const GRAD_MLP_ACT_BLOCK: &str = "grad.mlp_act_block";
/// fp32 logits of the local vocabulary slice.
pub const HEAD_LOGITS_FP32: &str = "head.logits_fp32";
/// Receive buffer of a traveling output-head shard (METP).
pub const HEAD_WEIGHT_RECV: &str = "head.weight_recv";
/// Receive buffer of a traveling K/V block.
pub const COMM_KV_RECV: &str = "comm.kv_recv";
/// Receive buffer of traveling fp32 dK/dV accumulators.
pub const COMM_DKV_RECV_FP32: &str = "comm.dkv_recv_fp32";
/// Receive buffer of a K or V chunk (RSA).
pub const COMM_KV_CHUNK_RECV: &str = "comm.kv_chunk_recv";
/// All-gathered block input (TP + SP).
pub const COMM_ALLGATHER_INPUT: &str = "comm.allgather_input";
/// All-to-all copy of Q, K and V (Ulysses).
pub const COMM_ALL_TO_ALL_QKV: &str = "comm.all_to_all_qkv";
/// Receive buffer of one ring all-reduce step.
pub const COMM_ALLREDUCE_RECV: &str = "comm.allreduce_recv";
