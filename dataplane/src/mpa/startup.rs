//! MPA Request and Reply frames (RFC 5044 7.1.1, RFC 6581 6 and 9). (being written)
