//! DDP segment headers (RFC 5041). (being written)
