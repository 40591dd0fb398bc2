//! Scale: many live sessions on one broker (local backend) and the resident memory each costs,
//! idle and after each printed some output into its ring with no client attached.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, bail};
use attach_ticket::{TicketKey, TicketRole};
use bytes::Bytes;
use ptyhub_proto::broker::v1 as broker;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use crate::stack::Stack;

/// How long the sessions may take to reach a state: a liveness bound.
const PATIENCE: Duration = Duration::from_secs(180);

/// Resident memory per session, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct SessionMemory {
    pub sessions: usize,
    pub output_bytes: u64,
    pub idle_kib: f64,
    pub after_output_kib: f64,
    /// What each session's ring holds after the output (bytes actually used).
    pub ring_used_bytes: u64,
}

/// This process's resident set in KiB (`VmRSS`).
pub fn resident_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")
}

/// Spawns `sessions` shells on the broker directly (the session cap is session-api's, and this
/// measures the broker), measures, makes each print `output_bytes` with nobody attached,
/// measures again, and kills them all.
pub async fn session_memory(
    stack: &Stack,
    sessions: usize,
    output_bytes: u64,
    ring_bytes: u64,
) -> Result<SessionMemory> {
    let before = resident_kib()?;
    let script = format!(
        "printf R; read -r go; yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {output_bytes}; exec sleep 3600"
    );
    let mut ids = Vec::with_capacity(sessions);
    let result = async {
        for _ in 0..sessions {
            let id = Uuid::new_v4();
            stack
                .broker
                .clone()
                .spawn(broker::SpawnRequest {
                    session_id: id.to_string(),
                    target: Some(broker::Target {
                        kind: Some(broker::target::Kind::Local(broker::LocalTarget {})),
                    }),
                    command: vec!["/bin/sh".to_owned(), "-c".to_owned(), script.clone()],
                    env: HashMap::new(),
                    cwd: String::new(),
                    user: String::new(),
                    size: Some(broker::TerminalSize { cols: 80, rows: 24 }),
                })
                .await
                .context("spawn")?;
            ids.push(id);
        }
        wait_for_output(stack, &ids, 1).await?;
        let idle = resident_kib()?;
        for id in &ids {
            press_enter(stack, &stack.ticket_key, *id).await?;
        }
        wait_for_output(stack, &ids, output_bytes).await?;
        // Let the last reads land in the rings.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = resident_kib()?;
        let count = sessions as f64;
        Ok(SessionMemory {
            sessions,
            output_bytes,
            idle_kib: idle.saturating_sub(before) as f64 / count,
            after_output_kib: after.saturating_sub(before) as f64 / count,
            ring_used_bytes: output_bytes.min(ring_bytes),
        })
    }
    .await;
    for id in &ids {
        let _ = stack
            .broker
            .clone()
            .kill(broker::KillRequest {
                session_id: id.to_string(),
            })
            .await;
    }
    result
}

/// Attaches as controller, sends a newline, and detaches.
async fn press_enter(stack: &Stack, ticket_key: &TicketKey, id: Uuid) -> Result<()> {
    let (input, receiver) = mpsc::channel(4);
    let ticket = ticket_key.sign(
        id,
        TicketRole::Controller,
        SystemTime::now() + Duration::from_secs(300),
    );
    let frames = [
        broker::client_frame::Frame::Hello(broker::Hello {
            ticket,
            session_id: id.to_string(),
            role: broker::Role::Controller as i32,
            size: None,
            since: None,
        }),
        broker::client_frame::Frame::Input(broker::Input {
            data: Bytes::from_static(b"\n"),
        }),
    ];
    for frame in frames {
        input
            .send(broker::ClientFrame { frame: Some(frame) })
            .await
            .map_err(|_| anyhow::anyhow!("attach channel closed"))?;
    }
    let mut output = stack
        .broker
        .clone()
        .attach(ReceiverStream::new(receiver))
        .await
        .context("attach")?
        .into_inner();
    // Stay attached until the newline's echo (offset 1 on) arrives, so that the input was
    // applied before the detach.
    let wait = async {
        while let Some(frame) = output.message().await? {
            if let Some(broker::server_frame::Frame::Output(chunk)) = frame.frame
                && chunk.offset + chunk.data.len() as u64 > 1
            {
                return Ok(());
            }
        }
        bail!("the attach stream ended before the newline's echo")
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .context("no echo of the newline")?
}

/// Waits until every session's output offset is at least `bytes`.
async fn wait_for_output(stack: &Stack, ids: &[Uuid], bytes: u64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let listed = stack
            .broker
            .clone()
            .list(broker::ListRequest {})
            .await?
            .into_inner();
        let offsets: HashMap<String, u64> = listed
            .sessions
            .into_iter()
            .map(|session| (session.session_id, session.output_offset))
            .collect();
        let behind = ids
            .iter()
            .filter(|id| {
                offsets
                    .get(&id.to_string())
                    .is_none_or(|offset| *offset < bytes)
            })
            .count();
        if behind == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{behind} sessions did not reach {bytes} output bytes within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
