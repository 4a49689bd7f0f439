//! MPA startup state machines. (being written)
