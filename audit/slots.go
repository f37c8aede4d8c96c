package audit

// Slots: the replication slots of a Postgres server and the WAL they retain.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Slot is one replication slot. Pointers are nil where Postgres has no value
// (a slot that never confirmed anything).
type Slot struct {
	Name, Plugin, Type, Database string
	Active                       bool
	RestartLSN, ConfirmedLSN     *string
	RetainedBytes, LagBytes      *int64 // WAL kept for the slot; WAL not yet confirmed
}

// Slots lists the replication slots, measured against the current WAL
// position (the replay position on a standby).
func Slots(ctx context.Context, conn *pgx.Conn) ([]Slot, error) {
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return nil, fmt.Errorf("slots: %w", err)
	}
	cur := "pg_current_wal_lsn()"
	if inRecovery {
		cur = "pg_last_wal_replay_lsn()"
	}
	rows, err := conn.Query(ctx, `SELECT slot_name, coalesce(plugin, ''), slot_type, coalesce(database, ''), active,
		restart_lsn::text, confirmed_flush_lsn::text,
		pg_wal_lsn_diff(`+cur+`, restart_lsn)::bigint,
		pg_wal_lsn_diff(`+cur+`, confirmed_flush_lsn)::bigint
		FROM pg_replication_slots ORDER BY slot_name`)
	if err != nil {
		return nil, fmt.Errorf("slots: %w", err)
	}
	defer rows.Close()
	var slots []Slot
	for rows.Next() {
		var s Slot
		if err := rows.Scan(&s.Name, &s.Plugin, &s.Type, &s.Database, &s.Active, &s.RestartLSN, &s.ConfirmedLSN, &s.RetainedBytes, &s.LagBytes); err != nil {
			return nil, fmt.Errorf("slots: %w", err)
		}
		slots = append(slots, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("slots: %w", err)
	}
	return slots, nil
}

// Retaining reports whether s is an inactive slot holding more than limit
// bytes of WAL: Postgres keeps it until the consumer reconnects, and the
// disk can fill up.
func (s *Slot) Retaining(limit int64) bool {
	return !s.Active && s.RetainedBytes != nil && *s.RetainedBytes > limit
}
