//! zstd: the few C functions the store uses, a pool of reusable contexts, the shared dictionary,
//! per-record compression with the raw fallback, and checked decompression.
const std = @import("std");
const Io = std.Io;
const limits = @import("../base/limits.zig");
const Codec = @import("../files/format.zig").Codec;

pub const CCtx = opaque {};
pub const DCtx = opaque {};
pub const CDict = opaque {};
pub const DDict = opaque {};

extern fn ZSTD_createCCtx() ?*CCtx;
extern fn ZSTD_freeCCtx(cctx: ?*CCtx) usize;
extern fn ZSTD_CCtx_reset(cctx: *CCtx, reset: c_int) usize;
extern fn ZSTD_CCtx_setParameter(cctx: *CCtx, param: c_int, value: c_int) usize;
extern fn ZSTD_DCtx_setParameter(dctx: *DCtx, param: c_int, value: c_int) usize;
extern fn ZSTD_CCtx_refCDict(cctx: *CCtx, cdict: ?*const CDict) usize;
extern fn ZSTD_compress2(cctx: *CCtx, dst: [*]u8, dst_capacity: usize, src: [*]const u8, src_size: usize) usize;
extern fn ZSTD_createDCtx() ?*DCtx;
extern fn ZSTD_freeDCtx(dctx: ?*DCtx) usize;
extern fn ZSTD_decompressDCtx(dctx: *DCtx, dst: [*]u8, dst_capacity: usize, src: [*]const u8, src_size: usize) usize;
extern fn ZSTD_decompress_usingDDict(dctx: *DCtx, dst: [*]u8, dst_capacity: usize, src: [*]const u8, src_size: usize, ddict: *const DDict) usize;
extern fn ZSTD_createCDict(dict: [*]const u8, dict_size: usize, level: c_int) ?*CDict;
extern fn ZSTD_freeCDict(cdict: ?*CDict) usize;
extern fn ZSTD_createDDict(dict: [*]const u8, dict_size: usize) ?*DDict;
extern fn ZSTD_freeDDict(ddict: ?*DDict) usize;
extern fn ZSTD_isError(code: usize) c_uint;
extern fn ZSTD_getErrorName(code: usize) [*:0]const u8;
extern fn ZSTD_getErrorCode(code: usize) c_int;
extern fn ZDICT_trainFromBuffer(dict: [*]u8, dict_capacity: usize, samples: [*]const u8, sample_sizes: [*]const usize, sample_count: c_uint) usize;
extern fn ZDICT_isError(code: usize) c_uint;
extern fn ZDICT_getErrorName(code: usize) [*:0]const u8;

/// ZSTD_error_dstSize_tooSmall in zstd_errors.h.
const zstd_error_dst_size_too_small: c_int = 70;
/// ZSTD_reset_session_and_parameters, ZSTD_c_compressionLevel and ZSTD_c_checksumFlag in zstd.h.
const zstd_reset_session_and_parameters: c_int = 3;
const zstd_c_compression_level: c_int = 100;
const zstd_c_checksum_flag: c_int = 201;
/// ZSTD_c_minMatch in zstd.h, and the value the zstd codec writes with (module doc of
/// `configure`); 0 is zstd's choice for the level and the record's size.
const zstd_c_min_match: c_int = 105;
const min_match_zstd: c_int = 5;
/// ZSTD_d_forceIgnoreChecksum (ZSTD_d_experimentalParam3 in zstd.h, a stable value since 1.4.7):
/// 1 skips the frame's content checksum, 0 checks it.
const zstd_d_force_ignore_checksum: c_int = 1002;

pub const level_zstd: c_int = 3;
pub const level_zstd_dict: c_int = 19;
/// Dictionary sizes train_dict accepts (ZDICT's minimum; the README's maximum).
pub const dict_size_min: u64 = 256;
pub const dict_size_max: u64 = 1 << 20;
/// ZDICT keeps a quarter of the samples for testing and needs at least 5 to train on.
pub const dict_sample_count_min: u64 = 7;

/// The dictionary loaded from dict.zr. Immutable once built; shared by all threads.
pub const Dictionary = struct {
    bytes: []u8,
    ddict: *DDict,
    /// Built on the first dictionary append (level 19 tables are costly and readers never need
    /// them); guarded by the store's append mutex.
    cdict: ?*CDict = null,

    /// Takes ownership of `bytes` (allocated with `allocator`) on success. zstd refuses a
    /// dictionary whose header or entropy tables do not parse (or, rarely, memory): either way
    /// the caller reports the file as unusable, never as out of memory.
    pub fn init(bytes: []u8) error{Invalid}!Dictionary {
        const ddict = ZSTD_createDDict(bytes.ptr, bytes.len) orelse return error.Invalid;
        return .{ .bytes = bytes, .ddict = ddict };
    }

    pub fn deinit(dict: *Dictionary, allocator: std.mem.Allocator) void {
        _ = ZSTD_freeDDict(dict.ddict);
        _ = ZSTD_freeCDict(dict.cdict);
        allocator.free(dict.bytes);
        dict.* = undefined;
    }

    pub fn compressionDict(dict: *Dictionary) error{OutOfMemory}!*const CDict {
        if (dict.cdict == null) {
            dict.cdict = ZSTD_createCDict(dict.bytes.ptr, dict.bytes.len, level_zstd_dict) orelse
                return error.OutOfMemory;
        }
        return dict.cdict.?;
    }
};

/// Reusable compression and decompression contexts: a shard takes one for its whole block of
/// records and gives it back, so contexts are created once per concurrent shard, not per record.
pub const ContextPool = struct {
    mutex: Io.Mutex = .init,
    cctxs: [capacity]*CCtx = undefined,
    cctx_count: usize = 0,
    dctxs: [capacity]*DCtx = undefined,
    dctx_count: usize = 0,

    const capacity = 64;

    pub fn acquireCompressor(pool: *ContextPool, io: Io) error{OutOfMemory}!*CCtx {
        pool.mutex.lockUncancelable(io);
        if (pool.cctx_count > 0) {
            pool.cctx_count -= 1;
            const cctx = pool.cctxs[pool.cctx_count];
            pool.mutex.unlock(io);
            return cctx;
        }
        pool.mutex.unlock(io);
        return ZSTD_createCCtx() orelse error.OutOfMemory;
    }

    pub fn releaseCompressor(pool: *ContextPool, io: Io, cctx: *CCtx) void {
        pool.mutex.lockUncancelable(io);
        defer pool.mutex.unlock(io);
        if (pool.cctx_count == capacity) {
            _ = ZSTD_freeCCtx(cctx);
            return;
        }
        pool.cctxs[pool.cctx_count] = cctx;
        pool.cctx_count += 1;
    }

    pub fn acquireDecompressor(pool: *ContextPool, io: Io) error{OutOfMemory}!*DCtx {
        pool.mutex.lockUncancelable(io);
        if (pool.dctx_count > 0) {
            pool.dctx_count -= 1;
            const dctx = pool.dctxs[pool.dctx_count];
            pool.mutex.unlock(io);
            return dctx;
        }
        pool.mutex.unlock(io);
        return ZSTD_createDCtx() orelse error.OutOfMemory;
    }

    pub fn releaseDecompressor(pool: *ContextPool, io: Io, dctx: *DCtx) void {
        pool.mutex.lockUncancelable(io);
        defer pool.mutex.unlock(io);
        if (pool.dctx_count == capacity) {
            _ = ZSTD_freeDCtx(dctx);
            return;
        }
        pool.dctxs[pool.dctx_count] = dctx;
        pool.dctx_count += 1;
    }

    pub fn deinit(pool: *ContextPool) void {
        for (pool.cctxs[0..pool.cctx_count]) |cctx| _ = ZSTD_freeCCtx(cctx);
        for (pool.dctxs[0..pool.dctx_count]) |dctx| _ = ZSTD_freeDCtx(dctx);
        pool.* = .{};
    }
};

pub const Compressed = union(enum) {
    /// The frame's size (smaller than the input).
    size: usize,
    /// The frame would not be smaller: store the record raw.
    raw,
    /// zstd's description of its error.
    failed: [*:0]const u8,
};

/// Compresses `src` into one frame in `dst` (room for src.len - 1 bytes is enough: anything
/// larger is stored raw anyway). Frames carry zstd's content checksum, which decompression
/// checks unless the record's stored bytes were just checked against sums.zr.
pub fn compress(cctx: *CCtx, codec: Codec, cdict: ?*const CDict, src: []const u8, dst: []u8) Compressed {
    std.debug.assert(codec == .zstd or codec == .zstd_dict);
    if (src.len == 0) return .raw;
    const capacity = @min(dst.len, src.len - 1);
    if (capacity == 0) return .raw;
    if (configure(cctx, codec, cdict)) |detail| return .{ .failed = detail };
    const result = ZSTD_compress2(cctx, dst.ptr, capacity, src.ptr, src.len);
    if (ZSTD_isError(result) != 0) {
        if (ZSTD_getErrorCode(result) == zstd_error_dst_size_too_small) return .raw;
        return .{ .failed = ZSTD_getErrorName(result) };
    }
    std.debug.assert(result < src.len);
    return .{ .size = result };
}

/// Sets a pooled context up for one codec: its level (or dictionary) and the content checksum.
/// The zstd codec also asks for matches of at least 5 bytes: told a record's size (12 KiB,
/// say), level 3 picks parameters for small inputs with 4-byte matches, whose extra short
/// sequences cost about a fifth more decoding time on compressible records for about 7% less
/// space (docs/decisions.md, "The zstd codec favours decoding"). zstd_dict keeps its level's
/// choice: it is the codec for size.
fn configure(cctx: *CCtx, codec: Codec, cdict: ?*const CDict) ?[*:0]const u8 {
    const level = if (codec == .zstd_dict) level_zstd_dict else level_zstd;
    for ([_]usize{
        ZSTD_CCtx_reset(cctx, zstd_reset_session_and_parameters),
        ZSTD_CCtx_setParameter(cctx, zstd_c_compression_level, level),
        ZSTD_CCtx_setParameter(cctx, zstd_c_min_match, if (codec == .zstd) min_match_zstd else 0),
        ZSTD_CCtx_setParameter(cctx, zstd_c_checksum_flag, 1),
        ZSTD_CCtx_refCDict(cctx, if (codec == .zstd_dict) cdict.? else null),
    }) |code| {
        if (ZSTD_isError(code) != 0) return ZSTD_getErrorName(code);
    }
    return null;
}

/// Decompresses one frame into exactly `dst`. Returns null on success, else why the frame is
/// corrupt (a frame of any other size than dst.len is corrupt too).
pub fn decompress(dctx: *DCtx, ddict: ?*const DDict, src: []const u8, dst: []u8) ?[*:0]const u8 {
    return decompressChecking(dctx, ddict, src, dst, true);
}

/// `decompress`, checking the frame's content checksum only when `frame_check` is set: a record
/// whose stored bytes just matched their CRC32C decodes to what was written, and its XXH64 over
/// the decoded bytes would cost a second pass over them.
pub fn decompressChecking(dctx: *DCtx, ddict: ?*const DDict, src: []const u8, dst: []u8, frame_check: bool) ?[*:0]const u8 {
    const set = ZSTD_DCtx_setParameter(dctx, zstd_d_force_ignore_checksum, @intFromBool(!frame_check));
    if (ZSTD_isError(set) != 0) return ZSTD_getErrorName(set);
    const result = if (ddict) |d|
        ZSTD_decompress_usingDDict(dctx, dst.ptr, dst.len, src.ptr, src.len, d)
    else
        ZSTD_decompressDCtx(dctx, dst.ptr, dst.len, src.ptr, src.len);
    if (ZSTD_isError(result) != 0) return ZSTD_getErrorName(result);
    if (result != dst.len) return "frame size differs from the table's logical length";
    return null;
}

/// ZDICT_trainFromBuffer trains on the first 3/4 of the samples (FASTCOVER_DEFAULT_SPLITPOINT,
/// rounded down) in windows of this many bytes (its d = 8). zstd 1.5.7 counts that part's
/// windows as its size - 8 + 1 without checking that it holds one, so a part of fewer bytes,
/// in a set that holds 8 or more, divides by zero or runs past its tables (SIGFPE, SIGSEGV).
const train_window_size: usize = 8;

/// Trains a dictionary of at most dst.len bytes; returns its size or ZDICT's error description.
pub fn train(dst: []u8, samples: []const u8, sample_sizes: []const usize) union(enum) { size: usize, failed: [*:0]const u8 } {
    // (unsigned)(nbSamples * 0.75) in zstd: exact in a double for any count that fits a c_uint.
    const trained_count = sample_sizes.len * 3 / 4;
    var trained_size: usize = 0;
    for (sample_sizes[0..trained_count]) |size| trained_size += size;
    if (trained_size < train_window_size) {
        return .{ .failed = "zstd trains on the first three quarters of the samples, and they hold fewer than 8 bytes" };
    }
    const result = ZDICT_trainFromBuffer(dst.ptr, dst.len, samples.ptr, sample_sizes.ptr, @intCast(sample_sizes.len));
    if (ZDICT_isError(result) != 0) return .{ .failed = ZDICT_getErrorName(result) };
    return .{ .size = result };
}

test "training refuses samples whose first three quarters hold fewer than 8 bytes" {
    // zstd crashed on these (SIGFPE for 7 bytes, SIGSEGV below): the whole set holds 8 or more.
    var dict: [1024]u8 = undefined;
    const samples: [70]u8 = @splat('a');
    const cases = [_][]const usize{
        &[_]usize{ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }, // 7 bytes in the first 7 samples
        &[_]usize{ 1, 1, 1, 1, 1, 1, 1, 1 }, // 6 bytes in the first 6
        &[_]usize{ 0, 0, 0, 0, 0, 0, 0, 3, 3, 3 }, // none in the first 7
        &[_]usize{ 1, 1, 1, 1, 1, 30, 30 }, // 5 in the first 5 of 7
    };
    for (cases) |sizes| {
        var total: usize = 0;
        for (sizes) |size| total += size;
        try std.testing.expect(train(&dict, samples[0..total], sizes) == .failed);
    }
    // Eight bytes in the first three quarters are past the check (zstd decides from there).
    const enough = [_]usize{ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    _ = train(&dict, samples[0..enough.len], &enough);
}

test "compress and decompress round trip, with the raw fallback" {
    const cctx = ZSTD_createCCtx().?;
    defer _ = ZSTD_freeCCtx(cctx);
    const dctx = ZSTD_createDCtx().?;
    defer _ = ZSTD_freeDCtx(dctx);
    var src: [4096]u8 = undefined;
    for (&src, 0..) |*b, i| b.* = @intCast(i % 7);
    var compressed: [4096]u8 = undefined;
    const size = compress(cctx, .zstd, null, &src, &compressed).size;
    try std.testing.expect(size < 100);
    // The frame descriptor (the byte after the 4-byte magic) has the content checksum flag.
    try std.testing.expect(compressed[4] & 0x04 != 0);
    var out: [4096]u8 = undefined;
    try std.testing.expect(decompress(dctx, null, compressed[0..size], &out) == null);
    try std.testing.expectEqualSlices(u8, &src, &out);
    // A wrong destination size is corruption, not a crash.
    try std.testing.expect(decompress(dctx, null, compressed[0..size], out[0..100]) != null);
    try std.testing.expect(decompress(dctx, null, compressed[0..size], out[0..0]) != null);
    try std.testing.expect(decompress(dctx, null, src[0..size], &out) != null);
    // A flipped content checksum is caught, unless the caller checked the stored bytes itself
    // (the decoded bytes are still the record's: only the suffix was flipped)...
    compressed[size - 1] ^= 1;
    try std.testing.expect(decompress(dctx, null, compressed[0..size], &out) != null);
    @memset(&out, 0);
    try std.testing.expect(decompressChecking(dctx, null, compressed[0..size], &out, false) == null);
    try std.testing.expectEqualSlices(u8, &src, &out);
    // ...and the context checks the next frame again.
    try std.testing.expect(decompress(dctx, null, compressed[0..size], &out) != null);
    try std.testing.expect(decompressChecking(dctx, null, compressed[0..size], &out, true) != null);
    // Incompressible bytes do not shrink: stored raw.
    var prng = std.Random.DefaultPrng.init(1);
    prng.random().bytes(&src);
    try std.testing.expect(compress(cctx, .zstd, null, &src, &compressed) == .raw);
    try std.testing.expect(compress(cctx, .zstd, null, "", &compressed) == .raw);
}
