"""TP+SP fused ops: each collective of a tensor+sequence-parallel layer fused with its GEMM."""
