//! libibverbs for the rdma_cm layer (see the crate documentation).
