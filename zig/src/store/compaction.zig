//! Offline, in-place compaction of a store: live records packed towards chunk 0 in physical
//! order, one record move at a time, so an interrupted compaction always leaves a valid store.
const std = @import("std");
const assert = std.debug.assert;
const limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const meta_file = @import("../files/meta.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const Store = @import("store.zig").Store;
const Error = errors.Error;
const Position = format.Position;
const RecordLoc = format.RecordLoc;
const fail = meta_file.fail;

/// Offline in-place compaction (takes the store exclusively).
pub fn compact(store: *Store) Error!void {
    try store.beginMaintenance("compact");
    defer store.endMaintenance();
    // Compaction moves entries: the sums of a killed delete must be settled while its copies
    // are still exact copies.
    try @import("integrity.zig").repairPendingDelete(store);
    var compaction = try Compaction.init(store);
    defer compaction.deinit();
    while (try compaction.step()) {}
    try compaction.finish();
}

/// Compaction in steps, so a test can stop it after any single record move. The caller
/// holds the store exclusively. Records are visited in physical order and packed from the
/// start of chunk 0 in that order, so each one only moves to a lower address and never onto
/// bytes of a record not yet visited; each table entry is updated as soon as its record
/// lands, so the store is valid between any two steps.
pub const Compaction = struct {
    store: *Store,
    /// Live record indices in physical order.
    order: []u32,
    next: usize = 0,
    /// Where the next record goes.
    cursor: Position = .{ .chunk = 0, .offset = 0 },
    /// The last non-empty record visited: its old and new location (exact duplicate
    /// entries, which only an interrupted delete leaves, share the new location).
    previous: ?struct { source: RecordLoc, destination: Position } = null,
    buffer: []u8,
    /// Records whose bytes moved so far, and how many of them went through the scratch area.
    moved: u64 = 0,
    staged: u64 = 0,
    /// Highest chunk the store used before (files past the new frontier up to it are removed).
    chunk_last: u32,

    pub fn init(store: *Store) Error!Compaction {
        const record_count = store.meta.length();
        const order = store.allocator.alloc(u32, record_count) catch return errors.outOfMemory();
        errdefer store.allocator.free(order);
        for (order, 0..) |*o, i| o.* = @intCast(i);
        std.mem.sortUnstable(u32, order, store.meta.table, physicallyBefore);
        try checkNoOverlap(store.meta.table, order);
        const buffer = store.allocator.alloc(u8, limits.record_size_max) catch return errors.outOfMemory();
        const tail = store.meta.header.tail();
        return .{
            .store = store,
            .order = order,
            .buffer = buffer,
            .chunk_last = @min(tail.chunk + 1, limits.chunk_count_max - 1),
        };
    }

    pub fn deinit(compaction: *Compaction) void {
        compaction.store.allocator.free(compaction.order);
        compaction.store.allocator.free(compaction.buffer);
        compaction.* = undefined;
    }

    fn physicallyBefore(table: *const [limits.record_count_max]RecordLoc, a: u32, b: u32) bool {
        const ea = table[a];
        const eb = table[b];
        if (ea.chunk_id != eb.chunk_id) return ea.chunk_id < eb.chunk_id;
        if (ea.offset != eb.offset) return ea.offset < eb.offset;
        if (ea.phys_length != eb.phys_length) return ea.phys_length < eb.phys_length;
        return a < b;
    }

    /// Records must not overlap (except exact duplicates): moving one would clobber another.
    fn checkNoOverlap(table: *const [limits.record_count_max]RecordLoc, order: []const u32) Error!void {
        var end: Position = .{ .chunk = 0, .offset = 0 };
        var last: ?RecordLoc = null;
        for (order) |index| {
            const entry = table[index];
            if (entry.phys_length == 0) continue;
            const start: Position = .{ .chunk = entry.chunk_id, .offset = entry.offset };
            if (last) |l| if (l.chunk_id == entry.chunk_id and l.offset == entry.offset and l.phys_length == entry.phys_length) continue;
            if (start.order(end) == .lt) {
                diagnostic.note("corrupt store: record {d} overlaps another record", .{index});
                return error.Corrupt;
            }
            end = .{ .chunk = entry.chunk_id, .offset = @as(u64, entry.offset) + entry.phys_length };
            last = entry;
        }
    }

    /// Visits records until one has moved; false when every record has been visited.
    pub fn step(compaction: *Compaction) Error!bool {
        const store = compaction.store;
        while (compaction.next < compaction.order.len) {
            const index = compaction.order[compaction.next];
            compaction.next += 1;
            const entry = &store.meta.table[index];
            if (entry.phys_length == 0) {
                // Empty records own no bytes; they just follow the frontier.
                entry.chunk_id = @intCast(compaction.cursor.chunk);
                entry.offset = @intCast(compaction.cursor.offset);
                continue;
            }
            if (compaction.previous) |p| if (p.source.chunk_id == entry.chunk_id and p.source.offset == entry.offset and
                p.source.phys_length == entry.phys_length)
            {
                entry.chunk_id = @intCast(p.destination.chunk);
                entry.offset = @intCast(p.destination.offset);
                continue;
            };
            const source: Position = .{ .chunk = entry.chunk_id, .offset = entry.offset };
            const placement = format.place(compaction.cursor, entry.phys_length).?;
            assert(placement.start.order(source) != .gt);
            compaction.previous = .{ .source = entry.*, .destination = placement.start };
            compaction.cursor = placement.end;
            if (placement.start.order(source) == .eq) continue;
            try compaction.move(entry, source, placement.start);
            compaction.moved += 1;
            return true;
        }
        return false;
    }

    /// Moves one record to a lower address and points its entry there. A destination that
    /// overlaps the source is staged past the frontier first, so a crash in the middle of
    /// the copy never leaves the entry pointing at half-overwritten bytes.
    fn move(compaction: *Compaction, entry: *RecordLoc, source: Position, destination: Position) Error!void {
        const store = compaction.store;
        const io = pool.io();
        const size = entry.phys_length;
        const bytes = compaction.buffer[0..size];
        const source_file = try store.chunks.file(io, store.dir, source.chunk, false);
        const read = source_file.readPositionalAll(io, bytes, source.offset) catch |err|
            return fail(err, "read chunk {d}.zr", .{source.chunk});
        if (read != size) {
            diagnostic.note("corrupt store: chunk {d}.zr ends inside a record", .{source.chunk});
            return error.Corrupt;
        }
        const overlaps = destination.chunk == source.chunk and destination.offset + size > source.offset;
        if (overlaps) {
            const tail = store.meta.header.tail();
            if (format.place(tail, size)) |scratch| {
                // The scratch area becomes part of the written space first, so the entry
                // pointing there is valid at every moment.
                try compaction.writeBytes(scratch.start, bytes);
                store.meta.header.setTail(scratch.end);
                compaction.chunk_last = @max(compaction.chunk_last, @min(scratch.start.chunk, limits.chunk_count_max - 1));
                try compaction.pointAt(entry, scratch.start, true);
                compaction.staged += 1;
            }
        }
        try compaction.writeBytes(destination, bytes);
        try compaction.pointAt(entry, destination, false);
    }

    fn writeBytes(compaction: *Compaction, position: Position, bytes: []const u8) Error!void {
        const store = compaction.store;
        const io = pool.io();
        try store.chunks.reserve(io, store.dir, position.chunk, position.offset + bytes.len);
        const f = try store.chunks.file(io, store.dir, position.chunk, true);
        f.writePositionalAll(io, bytes, position.offset) catch |err|
            return fail(err, "write chunk {d}.zr", .{position.chunk});
        if (store.durable) f.sync(io) catch |err| return fail(err, "sync chunk {d}.zr", .{position.chunk});
    }

    fn pointAt(compaction: *Compaction, entry: *RecordLoc, position: Position, header_too: bool) Error!void {
        const store = compaction.store;
        entry.chunk_id = @intCast(position.chunk);
        entry.offset = @intCast(position.offset);
        if (store.durable) {
            const io = pool.io();
            const index = (@intFromPtr(entry) - @intFromPtr(&store.meta.table[0])) / @sizeOf(RecordLoc);
            try store.meta.flushEntries(io, index, 1);
            if (header_too) try store.meta.flushHeader(io);
        }
    }

    /// Moves the frontier down to the packed end and removes chunk files past it.
    pub fn finish(compaction: *Compaction) Error!void {
        assert(compaction.next == compaction.order.len);
        const store = compaction.store;
        const io = pool.io();
        store.meta.header.setTail(compaction.cursor);
        // The frontier must be on disk before the files it no longer covers disappear.
        try store.meta.flushAll(io);
        store.chunks.unmapAll(io);
        var id = compaction.cursor.chunk + 1;
        while (id <= compaction.chunk_last) : (id += 1) try store.chunks.remove(io, store.dir, id);
        // The tail chunk keeps only what it holds, so the store copies small after compaction.
        if (compaction.cursor.chunk < limits.chunk_count_max)
            try store.chunks.trim(io, store.dir, compaction.cursor.chunk, compaction.cursor.offset);
    }
};
