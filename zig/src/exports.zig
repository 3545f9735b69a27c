//! The C ABI of libloaderx (documented in zig/include/loaderx.h). This is the only file with
//! `export fn`s. Every argument is validated here; nothing a caller passes may panic.
const std = @import("std");
const status = @import("status.zig");
const Status = status.Status;

/// Bumped on every change to loaderx.h; loaderx/_native.py refuses a library with another value.
pub const abi_version: u32 = 1;

export fn lx_abi_version() callconv(.c) u32 {
    return abi_version;
}

export fn lx_status_name(code: c_int) callconv(.c) [*:0]const u8 {
    if (code < 0 or code >= status.status_count) return "unknown";
    const s: Status = @enumFromInt(code);
    return s.name().ptr;
}

export fn lx_last_error() callconv(.c) [*:0]const u8 {
    return status.message();
}

// ---- store ---------------------------------------------------------------------------------
// (lx_store_*, lx_after_fork_child: owned by the store work)

// ---- sampler -------------------------------------------------------------------------------
// (lx_sampler_fill: owned by the sampler work)

test "abi basics" {
    try std.testing.expectEqual(abi_version, lx_abi_version());
    try std.testing.expectEqualStrings("LX_IO", std.mem.span(lx_status_name(12)));
    try std.testing.expectEqualStrings("unknown", std.mem.span(lx_status_name(99)));
    try std.testing.expectEqualStrings("unknown", std.mem.span(lx_status_name(-1)));
}
