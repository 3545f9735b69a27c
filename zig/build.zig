//! Builds libloaderx: the Zig store and sampler plus zstd compiled from its C sources.
//!
//! zstd's sources are not in this repository. `build.py` fetches them (a registry package pinned
//! by version and sha256) and passes the folder holding zstd's `lib/` as `-Dzstd=...`.
//!
//! Steps: `install` (the shared library), `test` (the Zig suite in Debug and ReleaseFast),
//! `dist` (every published platform, one folder per wheel platform tag; `-Ddist-host-only` for
//! just this machine's).
const std = @import("std");

/// zstd's C files, relative to its `lib/` folder. Legacy formats are left out on purpose: the
/// store only ever reads frames it wrote itself.
const zstd_c_files = [_][]const u8{
    "common/debug.c",                      "common/entropy_common.c",
    "common/error_private.c",              "common/fse_decompress.c",
    "common/pool.c",                       "common/threading.c",
    "common/xxhash.c",                     "common/zstd_common.c",
    "compress/fse_compress.c",             "compress/hist.c",
    "compress/huf_compress.c",             "compress/zstd_compress.c",
    "compress/zstd_compress_literals.c",   "compress/zstd_compress_sequences.c",
    "compress/zstd_compress_superblock.c", "compress/zstd_double_fast.c",
    "compress/zstd_fast.c",                "compress/zstd_lazy.c",
    "compress/zstd_ldm.c",                 "compress/zstd_opt.c",
    "compress/zstd_preSplit.c",            "compress/zstdmt_compress.c",
    "decompress/huf_decompress.c",         "decompress/zstd_ddict.c",
    "decompress/zstd_decompress.c",        "decompress/zstd_decompress_block.c",
    "dictBuilder/cover.c",                 "dictBuilder/divsufsort.c",
    "dictBuilder/fastcover.c",             "dictBuilder/zdict.c",
};

/// Flags that keep zstd's symbols private to the library: only `lx_*` is exported.
const zstd_c_flags = [_][]const u8{
    "-DZSTD_LEGACY_SUPPORT=0",
    "-DZSTDLIB_VISIBILITY=",
    "-DZDICTLIB_VISIBILITY=",
    "-DZSTDERRORLIB_VISIBILITY=",
    "-DZSTD_MULTITHREAD=0",
    "-fvisibility=hidden",
    "-std=c99",
    // zstd is fuzzed upstream; Zig's C sanitizer (on in Debug and ReleaseSafe) cost its
    // decompression about 3% (benchmarks/probes/release_modes.py) and is left to our own code.
    "-fno-sanitize=undefined",
};

/// Every published platform: the Zig target, the portable CPU baseline, and the wheel platform
/// tag its folder is named after. This table is the one place the mapping lives: `zig build dist`
/// writes it out as `dist/targets.json`, which is what tools/wheels.py reads.
///
/// Floors are pinned in the triple (glibc 2.17, macOS 11.0): they decide which symbol versions
/// and load commands the linker may use, which is what makes the manylinux_2_17 and macosx_11_0
/// tags true. CPU baselines: x86-64-v2 (SSE4.2, POPCNT; NumPy's own x86-64 wheels require it from
/// 2.4 on, and the sampler's cyclic mode measured about 1.6x faster than on plain x86-64; zstd still picks its BMI2 decoders at run time), ARMv8-A with NEON,
/// and Apple's first arm64 Mac (the M1).
pub const DistTarget = struct { triple: []const u8, cpu: []const u8, wheel_tag: []const u8 };
pub const dist_targets = [_]DistTarget{
    .{ .triple = "x86_64-linux-gnu.2.17", .cpu = "x86_64_v2", .wheel_tag = "manylinux_2_17_x86_64" },
    .{ .triple = "aarch64-linux-gnu.2.17", .cpu = "generic", .wheel_tag = "manylinux_2_17_aarch64" },
    .{ .triple = "x86_64-linux-musl", .cpu = "x86_64_v2", .wheel_tag = "musllinux_1_2_x86_64" },
    .{ .triple = "aarch64-linux-musl", .cpu = "generic", .wheel_tag = "musllinux_1_2_aarch64" },
    .{ .triple = "x86_64-macos.11.0", .cpu = "x86_64_v2", .wheel_tag = "macosx_11_0_x86_64" },
    .{ .triple = "aarch64-macos.11.0", .cpu = "apple_m1", .wheel_tag = "macosx_11_0_arm64" },
    .{ .triple = "x86_64-windows-gnu", .cpu = "x86_64_v2", .wheel_tag = "win_amd64" },
    .{ .triple = "aarch64-windows-gnu", .cpu = "generic", .wheel_tag = "win_arm64" },
};

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = optimizeOption(b);
    // build.py passes the folder it fetched; a plain `zig build` in zig/ uses the same cache, which
    // exists once `python3 build.py native` (or any build.py command) has run.
    const zstd_option = b.option([]const u8, "zstd", "folder holding zstd's lib/ (build.py fetches it)");
    const zstd_lib: std.Build.LazyPath = if (zstd_option) |dir|
        .{ .cwd_relative = b.pathJoin(&.{ dir, "lib" }) }
    else
        b.path("../.cache/zstd-from-backports.zstd-1.8.0/lib");

    const lib = addLoaderxLibrary(b, target, optimize, zstd_lib);
    b.installArtifact(lib);

    const test_step = b.step("test", "run the Zig suite in Debug and ReleaseFast");
    for ([_]std.builtin.Optimize{ .debug, .fast }) |mode| {
        const tests = b.addTest(.{
            .name = b.fmt("loaderx-test-{s}", .{@tagName(mode)}),
            .root_module = createRootModule(b, target, mode, zstd_lib),
        });
        test_step.dependOn(&b.addRunArtifact(tests).step);
    }

    const dist_step = b.step("dist", "build the library for every published platform");
    const dist_host_only = b.option(bool, "dist-host-only", "dist: only the published platform " ++
        "this machine runs (its OS, CPU architecture and C library)") orelse false;
    var manifest_entries: [dist_targets.len][]const u8 = undefined;
    var manifest_count: usize = 0;
    for (dist_targets) |dist| {
        const query = std.Target.Query.parse(.{ .arch_os_abi = dist.triple, .cpu_features = dist.cpu }) catch
            @panic("bad triple in dist_targets");
        const resolved = b.resolveTargetQuery(query);
        if (dist_host_only and !runsOnHost(resolved.result, b.graph.host.result)) continue;
        const dist_lib = addLoaderxLibrary(b, resolved, .safe, zstd_lib);
        const install = b.addInstallArtifact(dist_lib, .{
            .dest_dir = .{ .override = .{ .custom = b.pathJoin(&.{ "dist", dist.wheel_tag }) } },
            .implib_dir = .disabled,
            .pdb_dir = .disabled,
        });
        dist_step.dependOn(&install.step);
        manifest_entries[manifest_count] = b.fmt("  {{\"wheel_tag\": \"{s}\", \"triple\": \"{s}\", \"cpu\": \"{s}\", \"library\": \"{s}\"}}", .{
            dist.wheel_tag, dist.triple, dist.cpu, dist_lib.out_filename,
        });
        manifest_count += 1;
    }
    if (manifest_count == 0) {
        dist_step.dependOn(&b.addFail("-Ddist-host-only: no published platform matches this host").step);
    }
    // The table as data for the Python packaging tools, so they never restate it.
    const manifest = b.fmt("{{\"targets\": [\n{s}\n]}}\n", .{
        std.mem.join(b.allocator, ",\n", manifest_entries[0..manifest_count]) catch @panic("OOM"),
    });
    const manifest_file = b.addWriteFiles().add("targets.json", manifest);
    dist_step.dependOn(&b.addInstallFile(manifest_file, "dist/targets.json").step);
}

/// Whether a published target is this machine's platform: same OS, architecture and C library
/// (the CPU baseline aside: the host runs the portable baseline build).
fn runsOnHost(target: std.Target, host: std.Target) bool {
    return target.os.tag == host.os.tag and target.cpu.arch == host.cpu.arch and target.abi == host.abi;
}

/// `--release` alone (and `--release=safe`) builds ReleaseSafe, the mode that ships: an impossible
/// state aborts with a message instead of being undefined behaviour, and it measured within noise
/// of ReleaseFast (README, "Release mode"). `--release=fast` and `--release=small` stay available;
/// no flag is Debug. (std's `preferred_optimize_mode` would map every `--release=X` to one mode.)
fn optimizeOption(b: *std.Build) std.builtin.Optimize {
    return switch (b.graph.release_mode) {
        .off => .debug,
        .any, .safe => .safe,
        .fast => .fast,
        .small => .small,
    };
}

fn addLoaderxLibrary(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.Optimize,
    zstd_lib: std.Build.LazyPath,
) *std.Build.Step.Compile {
    const module = createRootModule(b, target, optimize, zstd_lib);
    module.strip = optimize != .debug;
    return b.addLibrary(.{ .name = "loaderx", .linkage = .dynamic, .root_module = module });
}

/// The module shared by the library and the test binaries: Zig sources plus zstd.
fn createRootModule(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.Optimize,
    zstd_lib: std.Build.LazyPath,
) *std.Build.Module {
    const module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
        .pic = true,
    });
    // The C header as an import, so abi_test.zig can @embedFile it (files outside src/ are
    // otherwise out of a module's reach).
    module.addAnonymousImport("loaderx.h", .{ .root_source_file = b.path("include/loaderx.h") });
    module.addIncludePath(zstd_lib);
    module.addCSourceFiles(.{ .root = zstd_lib, .files = &zstd_c_files, .flags = &zstd_c_flags });
    // zstd's hand-written Huffman decoder is x86-64 System V assembly; elsewhere zstd uses C.
    const t = target.result;
    if (t.cpu.arch == .x86_64 and t.os.tag != .windows) {
        module.addAssemblyFile(zstd_lib.path(b, "decompress/huf_decompress_amd64.S"));
    } else {
        module.addCMacro("ZSTD_DISABLE_ASM", "1");
    }
    return module;
}
