"""One partition replica's log on disk: Kafka's UnifiedLog + LocalLog (rules 1-10).

Layout of a log directory ``<data dir>/<topic>-<partition>/``::

    00000000000000000000.log        batches, Kafka v2 format, back to back
    00000000000000000000.index      offset index  (relative offset i32, position i32)
    00000000000000000000.timeindex  time index    (timestamp i64, relative offset i32)
    leader-epoch-checkpoint         the leader epoch cache (replication.epoch)
    log-state-checkpoint            recovery point, log start offset, high watermark

API used by the log cleaner (replication.cleaner) and the cluster
------------------------------------------------------------------
``log.lock``                 an ``RLock``; hold it while reading ``log.segments`` and swapping.
``log.segments``             list of :class:`~replication.segment.LogSegment`, ordered by base offset
                             (a snapshot copy); ``log.active_segment`` is the last one.
``log.config``               the :class:`LogConfig` (``cleanup_policy``, ``delete_retention_ms``,
                             ``min_compaction_lag_ms``, ``segment_bytes``...).
``log.dir``                  the partition directory.
``log.first_unstable_offset`` settable (transactions); None means no open transaction.
``log.new_cleaned_segment(base_offset) -> LogSegment``
                             an empty segment whose files carry the ``.cleaned`` suffix
                             (``<base>.log.cleaned``, ``.index.cleaned``, ``.timeindex.cleaned``).
                             Fill it with ``segment.append(data)`` (whole batches, offsets
                             preserved, strictly increasing).
``log.replace_segments(new_segments, old_segments)``
                             atomically swap a run of *closed* (non-active) segments for cleaned
                             ones, Kafka's protocol: flush the new segments, rename their files
                             ``.cleaned`` -> ``.swap`` (highest base first), delete the old
                             segments, rename ``.swap`` -> live. On open, ``.cleaned`` files are
                             deleted, and ``.swap`` files are completed (old segments overlapping
                             the swap's offsets deleted, swap renamed live) unless a ``.cleaned``
                             file with a lower base remains (then the swap is rolled back).
``segment.base_offset``, ``segment.size``, ``segment.next_offset`` (offset after its last batch),
``segment.largest_timestamp``, ``segment.log_path``, ``segment.read_bytes(position, size)``,
``segment.batches(start_position=0)`` (iterator of BatchHeader, no record decoding).
"""
