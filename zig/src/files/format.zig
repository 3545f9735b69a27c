//! The on-disk layout of meta.zr (header and record table) and its validation. Pure: no I/O.
const std = @import("std");
const limits = @import("../base/limits.zig");
const assert = std.debug.assert;

pub const magic = "ZREC".*;
pub const version: u16 = 1;

/// The first 16 bytes of meta.zr: global state.
pub const Header = extern struct {
    magic: [4]u8,
    version: u16,
    /// Chunk holding the write frontier. Equals chunk_count_max only when every chunk is full.
    tail_chunk: u16,
    /// First free byte of the tail chunk. Always < chunk_size_max: a chunk filled to its last
    /// byte moves the frontier to offset 0 of the next chunk.
    tail_offset: u32,
    /// Live records; published with release ordering, read with acquire ordering.
    length: u32,

    pub fn tail(header: *const Header) Position {
        return .{ .chunk = header.tail_chunk, .offset = header.tail_offset };
    }

    pub fn setTail(header: *Header, position: Position) void {
        assert(position.offset < limits.chunk_size_max);
        assert(position.chunk <= limits.chunk_count_max);
        header.tail_chunk = @intCast(position.chunk);
        header.tail_offset = @intCast(position.offset);
    }
};

pub const Codec = enum(u8) {
    raw = 0,
    zstd = 1,
    zstd_dict = 2,
    _,

    pub fn isKnown(codec: Codec) bool {
        return switch (codec) {
            .raw, .zstd, .zstd_dict => true,
            _ => false,
        };
    }
};

/// One record's location: table[index] in meta.zr.
pub const RecordLoc = extern struct {
    /// Byte offset of the record inside its chunk.
    offset: u32,
    /// Stored (possibly compressed) size.
    phys_length: u32,
    /// Original size: what gather writes.
    logic_length: u32,
    chunk_id: u16,
    codec: Codec,
    _reserved: u8 = 0,
};

/// meta.zr's exact size: the header plus a table sized for the most records a store can hold.
pub const meta_size: u64 = @sizeOf(Header) + @as(u64, limits.record_count_max) * @sizeOf(RecordLoc);

comptime {
    assert(@sizeOf(Header) == 16 and @alignOf(Header) <= 16);
    assert(@sizeOf(RecordLoc) == 16 and @alignOf(RecordLoc) <= 16);
    // No padding: the fields' sizes add up to the struct's size.
    for (.{ Header, RecordLoc }) |T| {
        var sum: usize = 0;
        for (@typeInfo(T).@"struct".field_types) |field_type| sum += @sizeOf(field_type);
        assert(sum == @sizeOf(T));
    }
    // The table starts right after the header, naturally aligned.
    assert(@sizeOf(Header) % @alignOf(RecordLoc) == 0);
    assert(meta_size == 16 + (1 << 24) * 16);
}

/// A byte address in the chunk space: chunk id and offset inside it.
pub const Position = struct {
    chunk: u32,
    offset: u64,

    pub fn order(a: Position, b: Position) std.math.Order {
        if (a.chunk != b.chunk) return std.math.order(a.chunk, b.chunk);
        return std.math.order(a.offset, b.offset);
    }

    /// Bytes before this position: chunk * chunk_size_max + offset.
    pub fn bytes(position: Position) u64 {
        return @as(u64, position.chunk) * limits.chunk_size_max + position.offset;
    }
};

pub const Placement = struct {
    /// Where the record starts.
    start: Position,
    /// The frontier after it.
    end: Position,
};

/// Places a record of `size` bytes at the frontier `tail`, rolling over to the next chunk when it
/// would not fit: a record never straddles two chunks. Null when the chunks are exhausted.
pub fn place(tail: Position, size: u32) ?Placement {
    assert(size <= limits.record_size_max);
    assert(tail.offset < limits.chunk_size_max);
    var start = tail;
    if (start.offset + size > limits.chunk_size_max) start = .{ .chunk = start.chunk + 1, .offset = 0 };
    if (start.chunk >= limits.chunk_count_max) return null;
    const end_offset = start.offset + size;
    const end: Position = if (end_offset == limits.chunk_size_max)
        .{ .chunk = start.chunk + 1, .offset = 0 }
    else
        .{ .chunk = start.chunk, .offset = end_offset };
    return .{ .start = start, .end = end };
}

pub const HeaderProblem = enum { ok, bad_magic, bad_version, bad_tail, bad_length };

/// Checks a header read from disk. The caller reports anything but .ok.
pub fn checkHeader(header: *const Header) HeaderProblem {
    if (!std.mem.eql(u8, &header.magic, &magic)) return .bad_magic;
    if (header.version != version) return .bad_version;
    if (header.tail_chunk > limits.chunk_count_max) return .bad_tail;
    if (header.tail_chunk == limits.chunk_count_max and header.tail_offset != 0) return .bad_tail;
    if (header.length > limits.record_count_max) return .bad_length;
    return .ok;
}

pub const EntryProblem = enum { ok, bad_codec, too_large, raw_size_differs, beyond_tail, outside_chunk };

/// Checks a table entry against the frontier: every live record lies inside the written part of
/// the chunk space, has sizes within the limits and a known codec.
pub fn checkEntry(entry: RecordLoc, tail: Position) EntryProblem {
    if (!entry.codec.isKnown()) return .bad_codec;
    if (entry.phys_length > limits.record_size_max or entry.logic_length > limits.record_size_max)
        return .too_large;
    if (entry.codec == .raw and entry.phys_length != entry.logic_length) return .raw_size_differs;
    const end = @as(u64, entry.offset) + entry.phys_length;
    if (end > limits.chunk_size_max) return .outside_chunk;
    if (entry.chunk_id > tail.chunk) return .beyond_tail;
    if (entry.chunk_id == tail.chunk and end > tail.offset) return .beyond_tail;
    return .ok;
}

/// The cheap per-record check gather makes (the frontier moves under concurrent appends, so it
/// only checks what holds forever: sizes, codec, and staying inside one chunk).
pub fn checkEntryShape(entry: RecordLoc) EntryProblem {
    if (!entry.codec.isKnown()) return .bad_codec;
    if (entry.phys_length > limits.record_size_max or entry.logic_length > limits.record_size_max)
        return .too_large;
    if (entry.codec == .raw and entry.phys_length != entry.logic_length) return .raw_size_differs;
    if (entry.chunk_id >= limits.chunk_count_max) return .beyond_tail;
    if (@as(u64, entry.offset) + entry.phys_length > limits.chunk_size_max) return .outside_chunk;
    return .ok;
}

pub fn describeEntryProblem(problem: EntryProblem) []const u8 {
    return switch (problem) {
        .ok => "ok",
        .bad_codec => "unknown codec",
        .too_large => "size over record_size_max",
        .raw_size_differs => "raw record whose stored and logical sizes differ",
        .beyond_tail => "points beyond the write frontier",
        .outside_chunk => "points outside its chunk",
    };
}

test "place rolls over and never straddles chunks" {
    const size_max = limits.record_size_max;
    const p = place(.{ .chunk = 0, .offset = 0 }, 10).?;
    try std.testing.expectEqual(Position{ .chunk = 0, .offset = 0 }, p.start);
    try std.testing.expectEqual(Position{ .chunk = 0, .offset = 10 }, p.end);
    // Exactly filling a chunk moves the frontier to the next one.
    const full = place(.{ .chunk = 3, .offset = limits.chunk_size_max - size_max }, size_max).?;
    try std.testing.expectEqual(Position{ .chunk = 3, .offset = limits.chunk_size_max - size_max }, full.start);
    try std.testing.expectEqual(Position{ .chunk = 4, .offset = 0 }, full.end);
    // One byte too many rolls over.
    const rolled = place(.{ .chunk = 3, .offset = limits.chunk_size_max - size_max + 1 }, size_max).?;
    try std.testing.expectEqual(Position{ .chunk = 4, .offset = 0 }, rolled.start);
    // No chunk left.
    try std.testing.expect(place(.{ .chunk = limits.chunk_count_max - 1, .offset = limits.chunk_size_max - 1 }, 2) == null);
    try std.testing.expect(place(.{ .chunk = limits.chunk_count_max, .offset = 0 }, 0) == null);
}

test "header and entry checks" {
    var header: Header = .{ .magic = magic, .version = version, .tail_chunk = 1, .tail_offset = 100, .length = 3 };
    try std.testing.expectEqual(HeaderProblem.ok, checkHeader(&header));
    header.magic[0] = 'X';
    try std.testing.expectEqual(HeaderProblem.bad_magic, checkHeader(&header));
    header.magic = magic;
    header.version = 9;
    try std.testing.expectEqual(HeaderProblem.bad_version, checkHeader(&header));
    header.version = version;
    header.length = limits.record_count_max + 1;
    try std.testing.expectEqual(HeaderProblem.bad_length, checkHeader(&header));

    const tail: Position = .{ .chunk = 1, .offset = 100 };
    const good: RecordLoc = .{ .offset = 90, .phys_length = 10, .logic_length = 10, .chunk_id = 1, .codec = .raw };
    try std.testing.expectEqual(EntryProblem.ok, checkEntry(good, tail));
    var bad = good;
    bad.phys_length = 11;
    bad.logic_length = 11;
    try std.testing.expectEqual(EntryProblem.beyond_tail, checkEntry(bad, tail));
    bad = good;
    bad.chunk_id = 2;
    try std.testing.expectEqual(EntryProblem.beyond_tail, checkEntry(bad, tail));
    bad = good;
    bad.codec = @fromBackingInt(@intCast(7));
    try std.testing.expectEqual(EntryProblem.bad_codec, checkEntry(bad, tail));
    bad = good;
    bad.chunk_id = 0;
    bad.offset = std.math.maxInt(u32);
    try std.testing.expectEqual(EntryProblem.outside_chunk, checkEntry(bad, tail));
    bad = good;
    bad.codec = .zstd;
    bad.logic_length = limits.record_size_max + 1;
    try std.testing.expectEqual(EntryProblem.too_large, checkEntry(bad, tail));
}
