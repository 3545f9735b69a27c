//! zig/include/loaderx.h agrees with the Zig sources: every status (value and C name), the
//! status count, the open flags, the sampler modes, the limits and the fields of lx_stats,
//! lx_sampler_request, lx_array_facts, lx_verify_problem and lx_verify_summary.
//! The header is read as text (build.zig hands it over as the import "loaderx.h"), so whatever
//! statuses or constants it gains are checked too; tests/native/test_abi.py checks Python against it.
const std = @import("std");
const testing = std.testing;
const status = @import("../base/status.zig");
const limits = @import("../base/limits.zig");
const sampler = @import("../sampler/sampler.zig");
const integrity = @import("../store/integrity.zig");
const abi_types = @import("abi_types.zig");
const LxStore = @import("handles.zig").LxStore;
const pool_advice = @import("../os/pool_advice.zig");
const raw_copy = @import("../store/raw_copy.zig");
const gather_streams = @import("../store/gather_streams.zig");

const header = @embedFile("loaderx.h");

/// The header's text between `start` and the next `end`.
fn between(start: []const u8, end: []const u8) []const u8 {
    const from = (std.mem.indexOf(u8, header, start) orelse @panic("loaderx.h lacks a section the ABI test reads")) + start.len;
    const to = std.mem.indexOfPos(u8, header, from, end) orelse @panic("loaderx.h section is not closed");
    return header[from..to];
}

/// The value of `#define name value[u]`, or null if the header has no such define.
fn define(name: []const u8) ?u64 {
    var lines = std.mem.splitScalar(u8, header, '\n');
    while (lines.next()) |line| {
        var words = std.mem.tokenizeAny(u8, line, " \t");
        if (!std.mem.eql(u8, words.next() orelse continue, "#define")) continue;
        if (!std.mem.eql(u8, words.next() orelse continue, name)) continue;
        const value = std.mem.trimEnd(u8, words.next() orelse return null, "uUlL");
        return std.fmt.parseInt(u64, value, 0) catch null;
    }
    return null;
}

test "every lx_status in the header is the Zig status of that value and C name, and no other exists" {
    var entries = std.mem.tokenizeScalar(u8, between("typedef enum lx_status {", "}"), '\n');
    var seen: usize = 0;
    var count: ?c_int = null;
    while (entries.next()) |raw| {
        const line = std.mem.trim(u8, raw[0 .. std.mem.indexOf(u8, raw, "/*") orelse raw.len], " \t,");
        if (line.len == 0) continue;
        const equals = std.mem.indexOfScalar(u8, line, '=') orelse return error.UnparsedStatusLine;
        const name = std.mem.trim(u8, line[0..equals], " \t");
        const value = try std.fmt.parseInt(c_int, std.mem.trim(u8, line[equals + 1 ..], " \t"), 10);
        if (std.mem.eql(u8, name, "LX_STATUS_COUNT")) {
            count = value;
            continue;
        }
        const zig_status = std.enums.fromInt(status.Status, value) orelse {
            std.debug.print("{s} = {d} has no Zig status\n", .{ name, value });
            return error.StatusMissingInZig;
        };
        try testing.expectEqualStrings(name, zig_status.name());
        seen += 1;
    }
    try testing.expectEqual(status.status_count, count orelse return error.NoStatusCount);
    try testing.expectEqual(@typeInfo(status.Status).@"enum".field_names.len, seen);
}

test "open flags, sampler modes and limits in the header are the Zig ones" {
    try testing.expectEqual(@as(?u64, abi_types.open_create), define("LX_OPEN_CREATE"));
    try testing.expectEqual(@as(?u64, abi_types.open_durable), define("LX_OPEN_DURABLE"));
    try testing.expectEqual(@as(?u64, abi_types.open_read_only), define("LX_OPEN_READ_ONLY"));
    try testing.expectEqual(@as(?u64, abi_types.open_verify_all), define("LX_OPEN_VERIFY_ALL"));
    try testing.expectEqual(@as(?u64, abi_types.open_verify_none), define("LX_OPEN_VERIFY_NONE"));
    try testing.expectEqual(@as(?u64, abi_types.pad_truncate), define("LX_PAD_TRUNCATE"));
    inline for (@typeInfo(integrity.Reason).@"enum".field_names) |field| {
        var name_buffer: [64]u8 = undefined;
        const name = try std.fmt.bufPrint(&name_buffer, "LX_VERIFY_{s}", .{field});
        _ = std.ascii.upperString(name[10..], name[10..]);
        try testing.expectEqual(@as(?u64, @backingInt(@field(integrity.Reason, field))), define(name));
    }
    inline for (@typeInfo(pool_advice.Policy).@"enum".field_names) |field| {
        var name_buffer: [64]u8 = undefined;
        const name = try std.fmt.bufPrint(&name_buffer, "LX_POOL_{s}", .{field});
        _ = std.ascii.upperString(name[8..], name[8..]);
        try testing.expectEqual(@as(?u64, @backingInt(@field(pool_advice.Policy, field))), define(name));
    }
    inline for (@typeInfo(raw_copy.StoresPolicy).@"enum".field_names) |field| {
        var name_buffer: [64]u8 = undefined;
        const name = try std.fmt.bufPrint(&name_buffer, "LX_STORES_{s}", .{field});
        _ = std.ascii.upperString(name[10..], name[10..]);
        try testing.expectEqual(@as(?u64, @backingInt(@field(raw_copy.StoresPolicy, field))), define(name));
    }
    inline for (@typeInfo(sampler.Mode).@"enum".field_names) |field| {
        var name_buffer: [64]u8 = undefined;
        const name = try std.fmt.bufPrint(&name_buffer, "LX_SAMPLER_{s}", .{field});
        _ = std.ascii.upperString(name[11..], name[11..]);
        try testing.expectEqual(@as(?u64, @backingInt(@field(sampler.Mode, field))), define(name));
    }
    try testing.expectEqual(@as(?u64, limits.record_size_max), define("LX_RECORD_SIZE_MAX"));
    try testing.expectEqual(@as(?u64, limits.record_count_max), define("LX_RECORD_COUNT_MAX"));
    try testing.expectEqual(@as(?u64, limits.chunk_count_max), define("LX_CHUNK_COUNT_MAX"));
    try testing.expectEqual(@as(?u64, limits.chunk_size_max), define("LX_CHUNK_SIZE_MAX"));
}

/// A header struct's fields, in order, have the names and integer types of the Zig mirror T.
fn expectStructMatches(comptime T: type, comptime c_name: []const u8) !void {
    var fields = std.mem.tokenizeScalar(u8, between("typedef struct " ++ c_name ++ " {", "}"), '\n');
    const info = @typeInfo(T).@"struct";
    var c_types: [info.field_names.len][]const u8 = undefined;
    // Whether the C field is a pointer (`T *name`: its name starts with the star).
    var pointers: [info.field_names.len]bool = undefined;
    var index: usize = 0;
    while (fields.next()) |raw| {
        const line = std.mem.trim(u8, raw[0 .. std.mem.indexOf(u8, raw, "/*") orelse raw.len], " \t;");
        if (line.len == 0) continue;
        var words = std.mem.tokenizeAny(u8, line, " \t");
        const c_type = words.next().?;
        const declared = words.next().?;
        const name = std.mem.trimStart(u8, declared, "*");
        try testing.expect(index < info.field_names.len);
        // A Zig field the library never reads is named with a leading underscore (`_reserved`).
        try testing.expectEqualStrings(std.mem.trimStart(u8, info.field_names[index], "_"), name);
        c_types[index] = c_type;
        pointers[index] = name.len != declared.len;
        index += 1;
    }
    try testing.expectEqual(info.field_names.len, index);
    inline for (info.field_types, 0..) |field_type, i| {
        const expected: struct { []const u8, bool } = switch (field_type) {
            u32 => .{ "uint32_t", false },
            u64 => .{ "uint64_t", false },
            ?*LxStore => .{ "lx_store", true },
            ?[*]u8 => .{ "uint8_t", true },
            else => @compileError("abi_test: map this field type to its C name"),
        };
        try testing.expectEqualStrings(expected[0], c_types[i]);
        try testing.expectEqual(expected[1], pointers[i]);
    }
}

test "lx_stats, lx_sampler_request, lx_array_facts, lx_gather_stream and lx_verify_* in the header are the Zig extern structs, field for field" {
    try expectStructMatches(abi_types.LxStats, "lx_stats");
    try expectStructMatches(abi_types.LxGatherStream, "lx_gather_stream");
    try testing.expectEqual(@as(usize, 32), @sizeOf(abi_types.LxGatherStream));
    try testing.expectEqual(@as(?u64, gather_streams.stream_count_max), define("LX_GATHER_STREAMS_MAX"));
    try expectStructMatches(abi_types.LxSamplerRequest, "lx_sampler_request");
    try expectStructMatches(abi_types.LxArrayFacts, "lx_array_facts");
    try expectStructMatches(integrity.Problem, "lx_verify_problem");
    try expectStructMatches(integrity.Summary, "lx_verify_summary");
    try testing.expectEqual(@as(usize, 16), @sizeOf(integrity.Problem));
    try testing.expectEqual(@as(usize, 32), @sizeOf(integrity.Summary));
    try testing.expectEqual(@as(usize, 32), @sizeOf(abi_types.LxStats));
}
