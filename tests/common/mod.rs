//! Helpers shared by the integration tests.

/// The octets of a hex sample in `tests/data/` (`#` comments and white space ignored).
pub fn sample(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let digits: String = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<String>()
        .split_whitespace()
        .collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex sample"))
        .collect()
}
