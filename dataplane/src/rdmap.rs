//! RDMAP (RFC 5040). (being written)
