//! The checks a store passes at open: its table against its header and its chunk files, read
//! as a consistent snapshot while another process may be appending.
const std = @import("std");
const Io = std.Io;
const limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const meta_file = @import("../files/meta.zig");
const chunk = @import("../files/chunk.zig");
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const runs_mod = @import("runs.zig");
const Error = errors.Error;
const Position = format.Position;
const RecordLoc = format.RecordLoc;

/// Attempts at reading a consistent header on open before calling a store corrupt.
const snapshot_attempt_max = 1000;

/// Checks the table against the header and the chunk files, on a consistent snapshot: another
/// process may be appending. The length is read first (acquire), then the frontier, then the
/// files' sizes, and only the entries below that length are checked; a writer publishes the
/// length last, so everything they point to is inside the frontier and the files. The frontier
/// is two separate fields, and a read racing a rollover to a new chunk can mix them: an entry
/// beyond it is corruption only if the header reads the same again.
pub fn checkSnapshot(io: Io, dir: Io.Dir, meta: *const meta_file.Meta, chunks: *chunk.Chunks, runs: *runs_mod.Runs) Error!void {
    var attempt: u32 = 0;
    while (true) : (attempt += 1) {
        const length = meta.length();
        const tail = meta.tail();
        try meta.checkCovers(io, length);
        try checkChunks(io, dir, tail, chunks);
        runs.clear();
        const bad = checkTable(meta, length, tail, chunks, runs) orelse return;
        if (bad.problem == .beyond_tail and attempt < snapshot_attempt_max) {
            if (meta.length() != length or meta.tail().order(tail) != .eq) continue;
        }
        const entry = bad.entry;
        if (bad.problem == .beyond_file) {
            diagnostic.note("corrupt store: record {d} ends at byte {d} of chunk file {s}, which is only {d} bytes (a truncated file)", .{
                bad.index, @as(u64, entry.offset) + entry.phys_length, chunk.name(entry.chunk_id).slice(), chunks.knownSize(entry.chunk_id),
            });
            return error.Corrupt;
        }
        diagnostic.note("corrupt store: record {d}'s table entry {s} (chunk {d}, offset {d}, {d} bytes)", .{
            bad.index, describeProblem(bad.problem), entry.chunk_id, entry.offset, entry.phys_length,
        });
        return error.Corrupt;
    }
}

const TableProblem = struct { index: u64, entry: RecordLoc, problem: Problem };
const Problem = union(enum) { entry: format.EntryProblem, beyond_file, beyond_tail };

/// The first entry below `length` that is not inside the frontier and its chunk file, if any.
/// Then, the table being sound, learns its runs.
fn checkTable(meta: *const meta_file.Meta, length: u32, tail: Position, chunks: *chunk.Chunks, runs: *runs_mod.Runs) ?TableProblem {
    for (meta.table[0..length], 0..) |entry, index| {
        const problem = format.checkEntry(entry, tail);
        if (problem == .beyond_tail) return .{ .index = index, .entry = entry, .problem = .beyond_tail };
        if (problem != .ok) return .{ .index = index, .entry = entry, .problem = .{ .entry = problem } };
        if (entry.phys_length > 0 and @as(u64, entry.offset) + entry.phys_length > chunks.knownSize(entry.chunk_id))
            return .{ .index = index, .entry = entry, .problem = .beyond_file };
    }
    runs.learn(meta.table, length);
    return null;
}

fn describeProblem(problem: Problem) []const u8 {
    return switch (problem) {
        .entry => |p| format.describeEntryProblem(p),
        .beyond_tail => format.describeEntryProblem(.beyond_tail),
        .beyond_file => "points past the end of its chunk file",
    };
}

/// Every chunk up to the frontier must exist; their sizes are noted for the table check.
fn checkChunks(io: Io, dir: Io.Dir, tail: Position, chunks: *chunk.Chunks) Error!void {
    const last = if (tail.offset > 0) tail.chunk + 1 else tail.chunk;
    var id: u32 = 0;
    while (id < @min(last, limits.chunk_count_max)) : (id += 1) {
        try chunks.notePresent(id, try chunk.presentSize(io, dir, id));
    }
}
