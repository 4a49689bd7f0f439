//! Build script for `dpdk-sys`.
//!
//! With the default `dpdk` feature it:
//! 1. finds DPDK through pkg-config (`libdpdk`, Debian's `libdpdk-dev`), failing with the
//!    `apt-get install` line to run when it is missing;
//! 2. runs bindgen (libclang from `libclang-dev`) over `csrc/wrapper.h` with a tight
//!    allowlist, and with `wrap_static_fns` so DPDK's `static inline` fast-path functions
//!    (`rte_eth_rx_burst`, `rte_pktmbuf_alloc`, ...) get real, linkable C wrappers;
//! 3. compiles those wrappers and `csrc/shim.c` with `cc` against DPDK's own cflags;
//! 4. links DPDK dynamically with the pkg-config libs, so EAL loads its PMDs (net_null,
//!    net_tap, net_af_packet, mempool_ring, ...) from Debian's plugin directory.
//!
//! Without the feature it does nothing and the crate is empty.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "dpdk")]
    dpdk::build();
}

#[cfg(feature = "dpdk")]
mod dpdk {
    use std::env;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use bindgen::callbacks::{IntKind, MacroParsingBehavior, ParseCallbacks};

    const INSTALL_HINT: &str = "apt-get install libdpdk-dev libclang-dev";

    /// Functions to bind (regexes, anchored by bindgen). `static inline` ones among them
    /// get C wrappers through `wrap_static_fns`.
    const FUNCTIONS: &[&str] = &[
        "rte_eal_.*",
        "rte_eth_.*",
        "rte_pktmbuf_.*",
        "rte_mbuf_.*",
        "rte_mempool_.*",
        // Rings of pointers only: the ~90 `_elem`/HTS/RTS/zero-copy variants would triple
        // the wrapper compile time (widen here when one is needed).
        "rte_ring_(create|free|lookup|reset|dump|get_memsize|init)",
        "rte_ring_(count|free_count|full|empty|get_size|get_capacity)",
        "rte_ring_(mp_|sp_)?enqueue(_bulk|_burst)?",
        "rte_ring_(mc_|sc_)?dequeue(_bulk|_burst)?",
        "rte_lcore_.*",
        "rte_get_next_lcore",
        "rte_get_main_lcore",
        "rte_socket_id",
        "rte_socket_count",
        "rte_thread_register",
        "rte_thread_unregister",
        "rte_strerror",
        "rte_rdtsc",
        "rte_rdtsc_precise",
        "rte_get_tsc_cycles",
        "rte_get_tsc_hz",
        // Registered memory from DPDK's heap (hugepages when EAL has them).
        "rte_zmalloc_socket",
        "rte_free",
        "rte_malloc_get_socket_stats",
        "dpdk_sys_.*",
    ];

    /// Object-like macros to turn into Rust constants. Only these are evaluated at all
    /// (every other macro is skipped before parsing), which keeps bindgen fast even with
    /// the clang fallback needed for `RTE_BIT64(n)`-style definitions.
    const MACROS: &[&str] = &[
        "RTE_PKTMBUF_HEADROOM",
        "RTE_MBUF_DEFAULT_BUF_SIZE",
        "RTE_MBUF_DEFAULT_DATAROOM",
        "RTE_MBUF_MAX_NB_SEGS",
        "RTE_MBUF_PRIV_ALIGN",
        "RTE_MBUF_F_.*",
        "RTE_PTYPE_.*",
        "RTE_ETH_RX_OFFLOAD_.*",
        "RTE_ETH_TX_OFFLOAD_.*",
        "RTE_ETH_RSS_.*",
        "RTE_ETH_LINK_.*",
        "RTE_ETH_SPEED_NUM_.*",
        "RTE_ETH_NAME_MAX_LEN",
        "RTE_ETHER_.*",
        "RTE_MAX_ETHPORTS",
        "RTE_MAX_LCORE",
        "RTE_MAX_NUMA_NODES",
        "RTE_CACHE_LINE_SIZE",
        "RTE_MEMPOOL_CACHE_MAX_SIZE",
        "RTE_MEMPOOL_NAMESIZE",
        "RTE_MEMPOOL_F_.*",
        "RTE_RING_NAMESIZE",
        "RING_F_.*",
        "SOCKET_ID_ANY",
        "LCORE_ID_ANY",
    ];

    /// Macros that are 64-bit flag masks (`ol_flags`, offload capabilities, RSS hash
    /// functions) and must be `u64` in Rust whatever their value.
    const U64_MACROS: &[&str] = &[
        "RTE_MBUF_F_",
        "RTE_ETH_RX_OFFLOAD_",
        "RTE_ETH_TX_OFFLOAD_",
        "RTE_ETH_RSS_",
    ];

    /// Extra types worth having even when no allowlisted function mentions them.
    const TYPES: &[&str] = &["rte_ether_hdr", "rte_proc_type_t", "rte_lcore_state_t"];

    #[derive(Debug)]
    struct Macros {
        wanted: names::Patterns,
    }

    impl ParseCallbacks for Macros {
        fn will_parse_macro(&self, name: &str) -> MacroParsingBehavior {
            if self.wanted.is_match(name) {
                MacroParsingBehavior::Default
            } else {
                MacroParsingBehavior::Ignore
            }
        }

        fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
            // Everything else keeps bindgen's default (u32 when it fits, i32 if negative).
            U64_MACROS
                .iter()
                .any(|p| name.starts_with(p))
                .then_some(IntKind::U64)
        }
    }

    /// Matches macro names against [`MACROS`] (whole names, or prefixes written `PREFIX.*`),
    /// without pulling a regex crate into the build script.
    mod names {
        #[derive(Debug)]
        pub struct Patterns(Vec<(String, bool)>);

        impl Patterns {
            pub fn new(patterns: &[&str]) -> Self {
                Patterns(
                    patterns
                        .iter()
                        .map(|p| match p.strip_suffix(".*") {
                            Some(prefix) => (prefix.to_owned(), true),
                            None => ((*p).to_owned(), false),
                        })
                        .collect(),
                )
            }

            pub fn is_match(&self, name: &str) -> bool {
                self.0.iter().any(|(p, prefix)| {
                    if *prefix {
                        name.starts_with(p.as_str())
                    } else {
                        name == p
                    }
                })
            }
        }
    }

    /// Stops the build with what is missing and the `apt-get` line that provides it (an
    /// exit rather than a panic, so cargo shows the message without a backtrace).
    fn missing(what: &str, detail: &str) -> ! {
        eprintln!(
            "\ndpdk-sys: {what}.\n\
             detail: {}\n\n\
             Install the Debian packages with:\n\n    {INSTALL_HINT}\n\n\
             or build without DPDK (the crate is then empty): --no-default-features\n",
            detail.trim()
        );
        println!("cargo:warning=dpdk-sys: {what}: run `{INSTALL_HINT}`");
        std::process::exit(1);
    }

    /// DPDK's full cflags (the pkg-config crate keeps only -I/-D; DPDK also needs
    /// `-include rte_config.h` and its `-march`).
    fn dpdk_cflags() -> Vec<String> {
        let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_owned());
        let out = Command::new(&pkg_config)
            .args(["--cflags", "libdpdk"])
            .output()
            .unwrap_or_else(|e| missing("cannot run pkg-config", &e.to_string()));
        if !out.status.success() {
            missing(
                "pkg-config --cflags libdpdk failed",
                &String::from_utf8_lossy(&out.stderr),
            );
        }
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    pub fn build() {
        let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
        let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("dir"));
        let csrc = manifest_dir.join("csrc");
        for f in ["wrapper.h", "shim.h", "shim.c"] {
            println!("cargo:rerun-if-changed={}", csrc.join(f).display());
        }

        // 1. DPDK through pkg-config; emits the dynamic link lines (-lrte_ethdev, ...).
        let lib = pkg_config::Config::new()
            .atleast_version("22.11")
            .probe("libdpdk")
            .unwrap_or_else(|e| missing("DPDK (pkg-config libdpdk) was not found", &e.to_string()));
        let cflags = dpdk_cflags();
        println!(
            "cargo:include={}",
            env::join_paths(&lib.include_paths)
                .expect("include paths")
                .to_string_lossy()
        );
        println!("cargo:cflags={}", cflags.join(" "));
        println!("cargo:version={}", lib.version);

        // 2. bindgen.
        let static_fns = out_dir.join("static_fns");
        let bindings = generate(&csrc, &cflags, &static_fns);
        bindings
            .write_to_file(out_dir.join("bindings.rs"))
            .expect("write bindings.rs");

        // 3. The static-inline wrappers and the shim, with DPDK's cflags.
        let mut cc = cc::Build::new();
        for f in &cflags {
            cc.flag(f);
        }
        cc.include(&csrc)
            // The wrappers call every allowlisted static inline, experimental ones too.
            .define("ALLOW_EXPERIMENTAL_API", None)
            .opt_level(2)
            .file(csrc.join("shim.c"))
            .file(static_fns.with_extension("c"))
            .compile("dpdk_sys_shim");
    }

    fn generate(csrc: &Path, cflags: &[String], static_fns: &Path) -> bindgen::Bindings {
        let mut builder = bindgen::Builder::default()
            .header(csrc.join("wrapper.h").to_string_lossy())
            .clang_args(cflags)
            .clang_arg(format!("-I{}", csrc.display()))
            .rust_target(bindgen::RustTarget::stable(85, 0).expect("rust target"))
            .rust_edition(bindgen::RustEdition::Edition2021)
            .use_core()
            .generate_comments(false)
            .layout_tests(true)
            .derive_default(true)
            .prepend_enum_name(false)
            .default_enum_style(bindgen::EnumVariation::Consts)
            .wrap_static_fns(true)
            .wrap_static_fns_path(static_fns)
            .clang_macro_fallback()
            .clang_macro_fallback_build_dir(static_fns.parent().expect("out dir"))
            // rte_errno is a thread-local behind a macro: use dpdk_sys_errno() instead.
            .blocklist_item("per_lcore__rte_errno")
            // Tracepoint bodies, not API.
            .blocklist_function("rte_mempool_trace_.*")
            .merge_extern_blocks(true)
            .parse_callbacks(Box::new(Macros {
                wanted: names::Patterns::new(MACROS),
            }))
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        for f in FUNCTIONS {
            builder = builder.allowlist_function(f);
        }
        for m in MACROS {
            builder = builder.allowlist_var(m);
        }
        for t in TYPES {
            builder = builder.allowlist_type(t);
        }

        // bindgen panics (rather than erroring) when it cannot dlopen libclang: catch that,
        // quietly, to say which package provides it.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate()));
        std::panic::set_hook(hook);
        match result {
            Ok(Ok(bindings)) => bindings,
            Ok(Err(e)) => panic!("dpdk-sys: bindgen failed on DPDK's headers: {e}"),
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("bindgen panicked");
                if msg.contains("libclang") {
                    missing(
                        "bindgen could not load libclang",
                        &format!(
                            "{msg}; if libclang is installed elsewhere, set LIBCLANG_PATH \
                             to the directory holding libclang.so"
                        ),
                    );
                }
                panic!("dpdk-sys: bindgen panicked: {msg}");
            }
        }
    }
}
