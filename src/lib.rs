//! payonce SDK (placeholder until the SDK lands).
