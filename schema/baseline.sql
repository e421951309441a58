-- The schema of migrations V1 to V29 in one file: a fresh install on TiDB
-- (`tickler migrate` detects it from VERSION(), or schema_baseline = on)
-- creates these tables and records V1..V29 as applied, so the migrations
-- after V29 apply on top as anywhere else. TiDB cannot run the history as
-- written: V11's ascii_general_ci is refused under its new collations
-- (ERROR 1273) and V10's MODIFY of a utf8mb4 VARCHAR into VARBINARY is a
-- lossy change it refuses (8200).
--
-- Kept identical, column for column and index for index, to what the
-- migrations make (tests/migrate.rs compares them on MariaDB), except:
--   * api_tokens is utf8mb4_general_ci, not ascii_general_ci: names still
--     compare without regard to case, and every value is ASCII anyway;
--   * tables with an AUTO_INCREMENT id take AUTO_ID_CACHE=1 on TiDB (a
--     comment everywhere else): ids then grow across all TiDB servers in
--     the order they were handed out, as tickler's bulk operations, paging
--     and read-backs expect (docs/scaling.md, "TiDB").
-- Every statement may run again: a baseline interrupted half-way is
-- finished by the next `tickler migrate`.

CREATE TABLE IF NOT EXISTS api_tokens (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  name varchar(100) NOT NULL,
  secret_sha256 binary(32) NOT NULL,
  topics varchar(4000) NOT NULL,
  scopes varchar(200) NOT NULL,
  rate_requests int unsigned DEFAULT NULL,
  rate_jobs int unsigned DEFAULT NULL,
  created_at datetime(3) NOT NULL,
  revoked_at datetime(3) DEFAULT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY ux_api_tokens_name (name),
  UNIQUE KEY ux_api_tokens_secret (secret_sha256)
) ENGINE=InnoDB /*T![auto_id_cache] AUTO_ID_CACHE=1 */ DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE IF NOT EXISTS bulk_ops (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  created_by varchar(110) NOT NULL,
  filter_json text NOT NULL,
  action_json text NOT NULL,
  status enum('running','done','failed') NOT NULL DEFAULT 'running',
  max_id bigint unsigned NOT NULL,
  cursor_id bigint unsigned NOT NULL DEFAULT 0,
  total bigint unsigned NOT NULL,
  done bigint unsigned NOT NULL DEFAULT 0,
  changed bigint unsigned NOT NULL DEFAULT 0,
  skipped bigint unsigned NOT NULL DEFAULT 0,
  errors text NULL,
  owner_token bigint unsigned NOT NULL,
  created_at datetime(3) NOT NULL,
  updated_at datetime(3) NOT NULL,
  finished_at datetime(3) DEFAULT NULL,
  PRIMARY KEY (id),
  KEY ix_bulk_ops_status_updated (status,updated_at)
) ENGINE=InnoDB /*T![auto_id_cache] AUTO_ID_CACHE=1 */ DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE IF NOT EXISTS dead_letters (
  job_id bigint unsigned NOT NULL,
  attempt int unsigned NOT NULL,
  created_at datetime(3) NOT NULL,
  error text NULL,
  claim_token bigint unsigned DEFAULT NULL,
  claimed_until datetime(3) DEFAULT NULL,
  tries int unsigned NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id,attempt),
  KEY ix_dead_letters_claim (claimed_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS instances (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  host varchar(255) NOT NULL,
  pid int unsigned NOT NULL,
  version varchar(64) NOT NULL,
  roles varchar(200) NOT NULL,
  started_at datetime(3) NOT NULL,
  heartbeat_at datetime(3) NOT NULL,
  pid_namespace varchar(64) DEFAULT NULL,
  PRIMARY KEY (id),
  KEY ix_instances_heartbeat (heartbeat_at)
) ENGINE=InnoDB /*T![auto_id_cache] AUTO_ID_CACHE=1 */ DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE IF NOT EXISTS job_events (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  job_id bigint unsigned NOT NULL,
  at datetime(3) NOT NULL,
  actor varchar(110) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status enum('pending','dispatching','dispatched','succeeded','dead','cancelled') NOT NULL,
  schedule_time datetime(3) NOT NULL,
  attempt int unsigned NOT NULL,
  PRIMARY KEY (id),
  KEY ix_job_events_job (job_id,id)
) ENGINE=InnoDB /*T![auto_id_cache] AUTO_ID_CACHE=1 */ DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS jobs (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  topic varchar(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  job_key varbinary(1020) DEFAULT NULL,
  payload mediumblob NOT NULL,
  payload_kind enum('json','bytes') NOT NULL DEFAULT 'bytes',
  headers text NULL,
  schedule_time datetime(3) NOT NULL,
  status enum('pending','dispatching','dispatched','succeeded','dead','cancelled') NOT NULL DEFAULT 'pending',
  attempt int unsigned NOT NULL DEFAULT 1,
  max_attempts int unsigned NOT NULL DEFAULT 1,
  version int unsigned NOT NULL DEFAULT 1,
  claim_token bigint unsigned DEFAULT NULL,
  claim_expires_at datetime(3) DEFAULT NULL,
  created_at datetime(3) NOT NULL DEFAULT current_timestamp(3),
  updated_at datetime(3) NOT NULL DEFAULT current_timestamp(3) ON UPDATE current_timestamp(3),
  dispatched_at datetime(3) DEFAULT NULL,
  kafka_partition int DEFAULT NULL,
  kafka_offset bigint DEFAULT NULL,
  last_error text NULL,
  create_token bigint unsigned DEFAULT NULL,
  expects_result tinyint(1) NOT NULL DEFAULT 0,
  backoff_base_ms int unsigned NOT NULL DEFAULT 1000,
  backoff_cap_ms int unsigned NOT NULL DEFAULT 3600000,
  ack_timeout_ms int unsigned NOT NULL DEFAULT 300000,
  ack_deadline datetime(3) DEFAULT NULL,
  claimed_by bigint unsigned DEFAULT NULL,
  trace_parent varchar(55) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  schedule_id bigint unsigned DEFAULT NULL,
  expires_at datetime(3) DEFAULT NULL,
  claimed_at datetime(3) DEFAULT NULL,
  event_token bigint unsigned NOT NULL DEFAULT 0,
  live_at datetime(3) GENERATED ALWAYS AS (if(status in ('pending','dispatching'),schedule_time,NULL)) VIRTUAL,
  edited_at datetime(3) GENERATED ALWAYS AS (if(status in ('pending','dispatching'),updated_at,NULL)) VIRTUAL,
  finished_at datetime(3) GENERATED ALWAYS AS (if(status in ('succeeded','dead','cancelled') or status = 'dispatched' and ack_deadline is null,updated_at,NULL)) VIRTUAL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_jobs_topic_key (topic,job_key),
  KEY ix_jobs_status_topic (status,topic),
  KEY ix_jobs_live (live_at),
  KEY ix_jobs_edited (edited_at,schedule_time,created_at),
  KEY ix_jobs_finished (finished_at),
  KEY ix_jobs_ack (ack_deadline),
  KEY ix_jobs_schedule (schedule_id)
) ENGINE=InnoDB /*T![auto_id_cache] AUTO_ID_CACHE=1 */ DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS schedules (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  topic varchar(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  schedule_key varbinary(1020) NOT NULL,
  payload mediumblob NOT NULL,
  payload_kind enum('json','bytes') NOT NULL DEFAULT 'bytes',
  headers text NULL,
  expects_result tinyint(1) NOT NULL DEFAULT 0,
  max_attempts int unsigned NOT NULL DEFAULT 1,
  backoff_base_ms int unsigned NOT NULL DEFAULT 1000,
  backoff_cap_ms int unsigned NOT NULL DEFAULT 3600000,
  ack_timeout_ms int unsigned NOT NULL DEFAULT 300000,
  cron varchar(255) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  time_zone varchar(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  every_ms bigint unsigned DEFAULT NULL,
  start_at datetime(3) NOT NULL,
  end_at datetime(3) DEFAULT NULL,
  max_occurrences int unsigned DEFAULT NULL,
  misfire enum('skip','fire_once','fire_all') NOT NULL DEFAULT 'fire_once',
  misfire_grace_ms int unsigned NOT NULL DEFAULT 60000,
  status enum('active','paused','ended') NOT NULL DEFAULT 'active',
  version int unsigned NOT NULL DEFAULT 1,
  cursor_at datetime(3) NOT NULL,
  next_at datetime(3) DEFAULT NULL,
  last_at datetime(3) DEFAULT NULL,
  occurrences int unsigned NOT NULL DEFAULT 0,
  created_by varchar(110) NOT NULL,
  created_at datetime(3) NOT NULL DEFAULT current_timestamp(3),
  updated_at datetime(3) NOT NULL DEFAULT current_timestamp(3) ON UPDATE current_timestamp(3),
  PRIMARY KEY (id),
  UNIQUE KEY uq_schedules_topic_key (topic,schedule_key),
  KEY ix_schedules_status_last (status,last_at)
) ENGINE=InnoDB /*T![auto_id_cache] AUTO_ID_CACHE=1 */ DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS shard_leases (
  shard int unsigned NOT NULL,
  owner bigint unsigned DEFAULT NULL,
  epoch bigint unsigned NOT NULL DEFAULT 0,
  acquired_at datetime(3) DEFAULT NULL,
  PRIMARY KEY (shard)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE IF NOT EXISTS topic_controls (
  topic varchar(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  paused tinyint(1) NOT NULL DEFAULT 0,
  max_per_second int unsigned DEFAULT NULL,
  updated_by varchar(110) NOT NULL DEFAULT 'sql',
  updated_at datetime(3) NOT NULL DEFAULT current_timestamp(3) ON UPDATE current_timestamp(3),
  PRIMARY KEY (topic),
  KEY ix_topic_controls_paused (paused)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
