//! Who is attached to one session: the controller lease, the viewers, and what each still has to
//! be sent.
//!
//! The controller lease carries a generation number that grows with every controller attach.
//! Input, resize and reset carry the generation of the client that sent them and are applied only
//! while it is still the current one; a superseded controller's late detach leaves the lease of
//! its successor alone (the stale-close guard).
//!
//! Each client also carries who it is for (the holder its ticket named), when it attached and
//! when it last wrote input: the session's presence ([`Attachments::presence`]), of which the
//! broker is the one source.
//!
//! Control also moves by request and grant: a viewer whose ticket admits a controller asks
//! ([`Attachments::request_control`]), the controller is sent the request and answers
//! ([`Attachments::answer_control`]); a grant moves the lease (a new generation) to the
//! requester on the same streams, a decline changes nothing but telling the requester. A caller
//! without a stream asks and answers too, for its principal (`attachments/requests.rs`).
//!
//! In the `shared` control mode there is no lease: every client whose ticket admits a
//! controller is one, each with a generation of its own, and none takes over from another
//! ([`Attachments::set_control_mode`] moves the roles of the attached clients when the mode
//! changes).

mod requests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use ptyhub_attach_ticket::TicketHolder;
use tokio::time::Instant;

use ptyhub_model::ControlMode;
pub use requests::{FrozenControl, FrozenRequest, FrozenReservation};
use requests::{PendingRequest, Reservation};

use crate::domain::{Attendee, ClientEvent, ControlChange, Role, TYPING_WINDOW};

/// Identifies one attached stream for as long as it lives. Never reused within a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(u64);

/// A queued event is held back until the client has been sent every output byte before
/// `after_offset`, so that events and output arrive in the order they happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedEvent {
    pub after_offset: u64,
    pub event: ClientEvent,
}

/// Most events a client may have queued before it is considered lost. Events are rare (resizes
/// are coalesced), so only a client that stopped reading for a long time gets here.
pub const MAX_QUEUED_EVENTS: usize = 256;

/// Most requests for control that may wait for the controller's answer at once. Each stream
/// has at most one pending, so the controller is sent at most this many `ControlRequested`
/// events between two answers: well under [`MAX_QUEUED_EVENTS`], so asking can never flood the
/// controller's queue and end its stream.
pub const MAX_PENDING_CONTROL_REQUESTS: usize = 32;

/// One attached client.
#[derive(Debug)]
pub struct Client {
    /// The controller generation this client was given; `None` for viewers.
    pub generation: Option<u64>,
    /// Offset of the next output byte to send to this client.
    pub cursor: u64,
    pub events: VecDeque<QueuedEvent>,
    /// Set once an event that ends the stream (exit, closed) was handed out.
    pub finished: bool,
    /// Set when the queue overflowed: the client is dropped.
    pub overflowed: bool,
    /// Set when the broker hands the session to its next process: the stream ends with a
    /// status that says to reattach.
    pub handing_over: bool,
    /// Who the client is for, as its ticket said (the default for a ticket that named nobody).
    pub holder: TicketHolder,
    /// When the client attached.
    pub since: SystemTime,
    /// When the client last wrote input.
    pub last_input_at: Option<Instant>,
    /// Whether its ticket admits a controller, so that it may ask for control.
    pub may_control: bool,
    /// Whether it means to type: it attached as a controller, or asked for control (and has
    /// not granted it away since). In the shared mode these are the controllers; a stream that
    /// attached to watch keeps watching until it asks.
    pub wants_control: bool,
}

/// The current controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerLease {
    pub client: ClientId,
    pub generation: u64,
}

/// Every client attached to one session.
#[derive(Debug, Default)]
pub struct Attachments {
    next_client: u64,
    generation: u64,
    mode: ControlMode,
    /// The lease of the exclusive mode; always `None` in the shared mode.
    controller: Option<ControllerLease>,
    clients: HashMap<ClientId, Client>,
    /// Requests for control nobody has answered, by id (oldest first).
    requests: BTreeMap<u64, PendingRequest>,
    next_request: u64,
    /// Control granted to a principal that had no stream to take it.
    reservation: Option<Reservation>,
    /// How long a request may wait before it is granted; `None`: until it is answered.
    grant_timeout: Option<Duration>,
    /// Changes of control not yet taken for the audit trail.
    control_changes: Vec<ControlChange>,
    /// Input bytes written per holder since `typed_since`, until the task takes them.
    typed: HashMap<TicketHolder, u64>,
    typed_since: Option<SystemTime>,
}

/// What [`Attachments::note_input`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputNoted {
    /// The client had not typed within [`TYPING_WINDOW`]: the presence changes.
    pub started_typing: bool,
    /// The first input since the tally was last taken: the task must arm its timer.
    pub opened_tally: bool,
}

/// The input bytes each holder wrote in one window, and when the window began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedTally {
    pub since: SystemTime,
    pub bytes: Vec<(TicketHolder, u64)>,
}

/// The result of [`Attachments::attach`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attached {
    pub client: ClientId,
    pub generation: Option<u64>,
    /// The controller this attach took over from, if any; it has been sent `TakenOver`.
    pub superseded: Option<ClientId>,
}

impl Attachments {
    /// No client yet, and controller generations that go on after `generation` (a session taken
    /// over from a previous broker process: a lease it gave out is never given again).
    pub fn after_generation(generation: u64) -> Self {
        Self {
            generation,
            ..Self::default()
        }
    }

    /// These attachments, with no client yet, in `mode` (a session adopted from a previous
    /// broker process goes on in its mode).
    pub fn in_control_mode(self, mode: ControlMode) -> Self {
        Self { mode, ..self }
    }

    /// Who may type now.
    pub fn control_mode(&self) -> ControlMode {
        self.mode
    }

    /// The last controller generation given out.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Ends every client's stream at its next read with a status that says to reattach (a
    /// hand-off).
    pub fn end_every_stream(&mut self) {
        for client in self.clients.values_mut() {
            client.handing_over = true;
        }
    }

    /// Adds a client for `holder` that will be sent output from `cursor` on. A controller takes
    /// the lease from the current one, which is queued a `TakenOver` event at `end` (and ends a
    /// reservation). A viewer that may control, of the principal control is reserved for, is
    /// given the lease (the task tells it, after `Connected`, as for the shared mode).
    pub fn attach(
        &mut self,
        role: Role,
        holder: TicketHolder,
        may_control: bool,
        cursor: u64,
        end: u64,
    ) -> Attached {
        self.next_client += 1;
        let client = ClientId(self.next_client);
        let mut generation = None;
        let mut superseded = None;
        if self.mode == ControlMode::Shared && role == Role::Controller {
            // Shared: a controller of its own generation, taking over from nobody.
            self.generation += 1;
            generation = Some(self.generation);
        } else if role == Role::Controller || self.take_reservation(&holder, may_control) {
            self.reservation = None;
            self.generation += 1;
            generation = Some(self.generation);
            if let Some(previous) = self.controller.replace(ControllerLease {
                client,
                generation: self.generation,
            }) {
                superseded = Some(previous.client);
                self.push_event(previous.client, end, ClientEvent::TakenOver);
            }
        }
        self.clients.insert(
            client,
            Client {
                generation,
                cursor,
                events: VecDeque::new(),
                finished: false,
                overflowed: false,
                handing_over: false,
                holder,
                since: SystemTime::now(),
                last_input_at: None,
                may_control: may_control || role == Role::Controller,
                wants_control: generation.is_some(),
            },
        );
        Attached {
            client,
            generation,
            superseded,
        }
    }

    /// Removes a client whose stream ended. Releases the lease only if that client still holds
    /// it: the end of a superseded stream never detaches the current controller.
    pub fn detach(&mut self, client: ClientId) -> bool {
        if self.controller.is_some_and(|lease| lease.client == client) {
            self.controller = None;
        }
        self.forget_requests_of(client);
        self.clients.remove(&client).is_some()
    }

    /// The controller generation `client` holds now: the one it attached with, or was granted;
    /// `None` for a viewer (and for a controller that granted control away).
    pub fn generation_of(&self, client: ClientId) -> Option<u64> {
        self.clients
            .get(&client)
            .and_then(|client| client.generation)
    }

    /// Whether `generation` is a current controller's: the lease's in the exclusive mode, any
    /// attached controller's in the shared mode.
    pub fn is_current_controller(&self, generation: Option<u64>) -> bool {
        if generation.is_none() {
            return false;
        }
        match self.mode {
            ControlMode::Exclusive => self.controller.map(|lease| lease.generation) == generation,
            ControlMode::Shared => self
                .clients
                .values()
                .any(|client| client.generation == generation),
        }
    }

    /// Changes the control mode, telling each client whose role changed with `RoleChanged`,
    /// queued at `end`; no stream is closed. To `shared`: every client that wants control
    /// (attached as a controller, or asked) and whose ticket admits it becomes a controller (the
    /// lease holder stays one with its generation, the others get new generations); a stream
    /// that attached to watch keeps watching. To `exclusive`: the longest attached controller
    /// keeps control as the lease holder (the one the others joined, so the choice does not
    /// depend on who happened to type last), and the other controllers read on as viewers.
    /// Pending requests for control are dropped either way: in the shared mode nobody needs to
    /// ask, and after it the lease holder never saw them.
    pub fn set_control_mode(&mut self, mode: ControlMode, end: u64) {
        if mode == self.mode {
            return;
        }
        self.mode = mode;
        self.requests.clear();
        let mut ids: Vec<ClientId> = self.clients.keys().copied().collect();
        ids.sort_unstable();
        match mode {
            ControlMode::Shared => {
                let lease = self.controller.take();
                for id in ids {
                    let holds_lease = lease.is_some_and(|lease| lease.client == id);
                    let client = self.clients.get_mut(&id).expect("listed above");
                    if holds_lease || !client.may_control || !client.wants_control {
                        continue;
                    }
                    self.generation += 1;
                    client.generation = Some(self.generation);
                    queue_event(client, end, ClientEvent::RoleChanged(Role::Controller));
                }
                // A viewer-only client (a share, a taken-over stream's stale generation) controls
                // nothing in the shared mode either.
                for client in self.clients.values_mut() {
                    if !client.may_control {
                        client.generation = None;
                    }
                }
            }
            ControlMode::Exclusive => {
                let mut kept = None;
                for id in ids {
                    let client = self.clients.get_mut(&id).expect("listed above");
                    let Some(generation) = client.generation else {
                        continue;
                    };
                    if kept.is_none() {
                        kept = Some(ControllerLease {
                            client: id,
                            generation,
                        });
                        continue;
                    }
                    client.generation = None;
                    queue_event(client, end, ClientEvent::RoleChanged(Role::Viewer));
                }
                self.controller = kept;
            }
        }
    }

    #[cfg(test)]
    pub fn controller(&self) -> Option<ControllerLease> {
        self.controller
    }

    /// The offset the current controller has been sent up to; in the shared mode, the
    /// controller furthest behind (each is flow-controlled, as the one controller is).
    pub fn controller_cursor(&self) -> Option<u64> {
        match self.mode {
            ControlMode::Exclusive => {
                let lease = self.controller?;
                self.clients.get(&lease.client).map(|client| client.cursor)
            }
            ControlMode::Shared => self
                .clients
                .values()
                .filter(|client| client.generation.is_some())
                .map(|client| client.cursor)
                .min(),
        }
    }

    pub fn get_mut(&mut self, client: ClientId) -> Option<&mut Client> {
        self.clients.get_mut(&client)
    }

    pub fn get(&self, client: ClientId) -> Option<&Client> {
        self.clients.get(&client)
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Attached controllers and viewers. A superseded controller still reading counts as a
    /// viewer: it is attached, but controls nothing.
    pub fn counts(&self) -> (u32, u32) {
        let controllers = match self.mode {
            ControlMode::Exclusive => u32::from(self.controller.is_some()),
            ControlMode::Shared => {
                let controlling = self.clients.values().filter(|c| c.generation.is_some());
                u32::try_from(controlling.count()).unwrap_or(u32::MAX)
            }
        };
        let total = u32::try_from(self.clients.len()).unwrap_or(u32::MAX);
        (controllers, total - controllers)
    }

    /// Notes that `client` wrote `bytes` of input at `now`: for its typing (presence) and in
    /// its holder's tally (attribution).
    pub fn note_input(&mut self, client: ClientId, bytes: u64, now: Instant) -> InputNoted {
        let Some(client) = self.clients.get_mut(&client) else {
            return InputNoted {
                started_typing: false,
                opened_tally: false,
            };
        };
        let was_typing = is_typing(client.last_input_at, now);
        client.last_input_at = Some(now);
        let opened_tally = self.typed_since.is_none();
        if opened_tally {
            self.typed_since = Some(SystemTime::now());
        }
        // Every keystroke passes here: the holder is cloned only the first time in a window.
        match self.typed.get_mut(&client.holder) {
            Some(typed) => *typed += bytes,
            None => {
                self.typed.insert(client.holder.clone(), bytes);
            }
        }
        InputNoted {
            started_typing: !was_typing,
            opened_tally,
        }
    }

    /// Takes the input tally since it was last taken; `None` when nobody typed.
    pub fn take_typed(&mut self) -> Option<TypedTally> {
        let since = self.typed_since.take()?;
        let mut bytes: Vec<(TicketHolder, u64)> = self.typed.drain().collect();
        bytes.sort_unstable_by(|a, b| a.0.principal.cmp(&b.0.principal));
        Some(TypedTally { since, bytes })
    }

    /// Who is attached as of `now`, oldest attach first: one entry per client, its role as it
    /// holds it now (a controller taken over from is a viewer).
    pub fn presence(&self, now: Instant) -> Vec<Attendee> {
        let mut clients: Vec<(&ClientId, &Client)> = self.clients.iter().collect();
        clients.sort_unstable_by_key(|(id, _)| **id);
        clients
            .into_iter()
            .map(|(id, client)| self.attendee(*id, client, now))
            .collect()
    }

    fn attendee(&self, id: ClientId, client: &Client, now: Instant) -> Attendee {
        Attendee {
            principal: client.holder.principal.clone(),
            role: self.role_of(id),
            surface: client.holder.surface.clone(),
            since: client.since.into(),
            typing: is_typing(client.last_input_at, now),
        }
    }

    /// When the first client that types now stops counting as typing, unless it types again.
    pub fn typing_ends_at(&self, now: Instant) -> Option<Instant> {
        self.clients
            .values()
            .filter_map(|client| client.last_input_at)
            .map(|at| at + TYPING_WINDOW)
            .filter(|ends| *ends > now)
            .min()
    }

    fn role_of(&self, client: ClientId) -> Role {
        let controls = match self.mode {
            ControlMode::Exclusive => self.controller.is_some_and(|lease| lease.client == client),
            ControlMode::Shared => self
                .clients
                .get(&client)
                .is_some_and(|client| client.generation.is_some()),
        };
        if controls {
            Role::Controller
        } else {
            Role::Viewer
        }
    }

    /// Queues `event` for one client, to be sent once it has been sent the output before
    /// `after_offset`.
    pub fn push_event(&mut self, client: ClientId, after_offset: u64, event: ClientEvent) {
        if let Some(client) = self.clients.get_mut(&client) {
            queue_event(client, after_offset, event);
        }
    }

    /// Queues `event` for every client.
    pub fn broadcast(&mut self, after_offset: u64, event: &ClientEvent) {
        for client in self.clients.values_mut() {
            queue_event(client, after_offset, event.clone());
        }
    }

    /// Queues a connected event for every client, each with its own role.
    pub fn broadcast_connected(
        &mut self,
        after_offset: u64,
        connected: impl Fn(Role) -> ClientEvent,
    ) {
        let roles: Vec<(ClientId, Role)> = self
            .clients
            .keys()
            .map(|id| (*id, self.role_of(*id)))
            .collect();
        for (id, role) in roles {
            if let Some(client) = self.clients.get_mut(&id) {
                queue_event(client, after_offset, connected(role));
            }
        }
    }

    /// Replaces whatever every client still had queued with `event`, sent next.
    pub fn broadcast_final(&mut self, event: &ClientEvent) {
        for client in self.clients.values_mut() {
            client.events.clear();
            client.events.push_back(QueuedEvent {
                after_offset: 0,
                event: event.clone(),
            });
        }
    }
}

/// Whether input at `last_input_at` is recent enough at `now` to count as typing.
fn is_typing(last_input_at: Option<Instant>, now: Instant) -> bool {
    last_input_at.is_some_and(|at| now < at + TYPING_WINDOW)
}

fn queue_event(client: &mut Client, after_offset: u64, event: ClientEvent) {
    // A burst of resizes is worth only its last one to a client that has not been sent them.
    if let ClientEvent::Resize(_) = event
        && let Some(last) = client.events.back_mut()
        && matches!(last.event, ClientEvent::Resize(_))
    {
        *last = QueuedEvent {
            after_offset: last.after_offset.max(after_offset),
            event,
        };
        return;
    }
    if client.events.len() >= MAX_QUEUED_EVENTS {
        client.overflowed = true;
        return;
    }
    client.events.push_back(QueuedEvent {
        after_offset,
        event,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::TerminalSize;
    use crate::error::{ClientAction, Error};

    #[test]
    fn takeover_moves_the_lease_and_tells_the_previous_controller() {
        let mut attachments = Attachments::default();
        let first = attachments.attach(Role::Controller, TicketHolder::default(), false, 0, 10);
        let viewer = attachments.attach(Role::Viewer, TicketHolder::default(), false, 0, 10);
        assert_eq!(first.superseded, None);
        assert_eq!(viewer.generation, None);
        assert!(attachments.is_current_controller(first.generation));

        let second = attachments.attach(Role::Controller, TicketHolder::default(), false, 10, 10);
        assert_eq!(second.superseded, Some(first.client));
        assert!(second.generation > first.generation);
        assert!(!attachments.is_current_controller(first.generation));
        assert!(attachments.is_current_controller(second.generation));
        assert!(!attachments.is_current_controller(viewer.generation));
        let told = &attachments.get(first.client).unwrap().events;
        assert_eq!(
            told.iter().map(|queued| &queued.event).collect::<Vec<_>>(),
            vec![&ClientEvent::TakenOver]
        );
        assert!(attachments.get(second.client).unwrap().events.is_empty());
        assert_eq!(attachments.counts(), (1, 2));
    }

    #[test]
    fn stale_close_of_a_superseded_controller_keeps_the_current_lease() {
        let mut attachments = Attachments::default();
        let first = attachments.attach(Role::Controller, TicketHolder::default(), false, 0, 0);
        let second = attachments.attach(Role::Controller, TicketHolder::default(), false, 0, 0);
        // The first stream ends late, after it was superseded.
        assert!(attachments.detach(first.client));
        assert_eq!(
            attachments.controller(),
            Some(ControllerLease {
                client: second.client,
                generation: second.generation.unwrap()
            })
        );
        assert!(attachments.is_current_controller(second.generation));
        // Detaching twice changes nothing.
        assert!(!attachments.detach(first.client));
        assert!(attachments.is_current_controller(second.generation));
        // The current controller's own end releases the lease.
        assert!(attachments.detach(second.client));
        assert_eq!(attachments.controller(), None);
        assert!(attachments.is_empty());
    }

    fn holder(principal: &str, surface: &str) -> TicketHolder {
        TicketHolder {
            principal: principal.to_owned(),
            surface: surface.to_owned(),
        }
    }

    #[test]
    fn presence_lists_each_client_with_its_role_now() {
        let mut attachments = Attachments::default();
        let now = Instant::now();
        attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        attachments.attach(Role::Viewer, holder("bob", "cli"), true, 0, 0);
        let listed = |attachments: &Attachments| {
            attachments
                .presence(now)
                .into_iter()
                .map(|attendee| (attendee.principal, attendee.role, attendee.surface))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            listed(&attachments),
            [
                ("alice".to_owned(), Role::Controller, "web".to_owned()),
                ("bob".to_owned(), Role::Viewer, "cli".to_owned()),
            ]
        );
        // Alice's second tab takes over: her first reads on as a viewer.
        attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        assert_eq!(
            listed(&attachments),
            [
                ("alice".to_owned(), Role::Viewer, "web".to_owned()),
                ("bob".to_owned(), Role::Viewer, "cli".to_owned()),
                ("alice".to_owned(), Role::Controller, "web".to_owned()),
            ]
        );
    }

    #[test]
    fn typing_starts_with_input_and_ends_after_the_window() {
        let mut attachments = Attachments::default();
        let start = Instant::now();
        let typist = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        attachments.attach(Role::Viewer, holder("bob", "web"), true, 0, 0);
        assert_eq!(attachments.typing_ends_at(start), None);

        assert!(
            attachments
                .note_input(typist.client, 1, start)
                .started_typing,
            "typing starts"
        );
        let later = start + TYPING_WINDOW / 2;
        assert!(
            !attachments
                .note_input(typist.client, 1, later)
                .started_typing,
            "and goes on"
        );
        let typing = |at| {
            attachments
                .presence(at)
                .into_iter()
                .map(|attendee| attendee.typing)
                .collect::<Vec<_>>()
        };
        assert_eq!(typing(later), [true, false]);
        assert_eq!(
            attachments.typing_ends_at(later),
            Some(later + TYPING_WINDOW)
        );
        let quiet = later + TYPING_WINDOW;
        assert_eq!(typing(quiet), [false, false]);
        assert_eq!(attachments.typing_ends_at(quiet), None);
        assert!(
            attachments
                .note_input(typist.client, 1, quiet)
                .started_typing,
            "typing starts again"
        );
    }

    fn events(attachments: &Attachments, client: ClientId) -> Vec<ClientEvent> {
        attachments
            .get(client)
            .unwrap()
            .events
            .iter()
            .map(|queued| queued.event.clone())
            .collect()
    }

    #[test]
    fn input_is_tallied_per_holder_until_taken() {
        let mut attachments = Attachments::default();
        let now = Instant::now();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let alice_again = attachments.attach(Role::Viewer, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "cli"), true, 0, 0);
        assert_eq!(attachments.take_typed(), None, "nobody typed");
        assert!(attachments.note_input(alice.client, 3, now).opened_tally);
        assert!(!attachments.note_input(bob.client, 5, now).opened_tally);
        attachments.note_input(alice_again.client, 2, now);
        let tally = attachments.take_typed().expect("a tally");
        assert_eq!(
            tally.bytes,
            [(holder("alice", "web"), 5), (holder("bob", "cli"), 5)]
        );
        assert_eq!(attachments.take_typed(), None, "taken once");
        assert!(
            attachments.note_input(bob.client, 1, now).opened_tally,
            "a new window"
        );
    }

    #[test]
    fn a_grant_moves_the_lease_on_the_same_streams() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "cli"), true, 0, 0);

        let request_id = attachments.request_control(bob.client, 0).unwrap();
        let told: [ClientEvent; 1] = events(&attachments, alice.client).try_into().unwrap();
        let [ClientEvent::ControlRequested { requester, .. }] = told else {
            panic!("the controller is sent the request");
        };
        assert_eq!(
            (requester.principal.as_str(), requester.role),
            ("bob", Role::Viewer)
        );

        attachments
            .answer_control(alice.client, request_id, true, 0)
            .unwrap();
        let granted = attachments.generation_of(bob.client);
        assert!(granted > alice.generation);
        assert!(attachments.is_current_controller(granted));
        assert_eq!(attachments.generation_of(alice.client), None);
        assert_eq!(
            events(&attachments, bob.client),
            [ClientEvent::RoleChanged(Role::Controller)]
        );
        assert_eq!(
            events(&attachments, alice.client).last(),
            Some(&ClientEvent::RoleChanged(Role::Viewer))
        );
        assert_eq!(attachments.counts(), (1, 1), "both streams stay attached");
        // A request is answered once.
        assert!(matches!(
            attachments.answer_control(bob.client, request_id, true, 0),
            Err(Error::UnknownControlRequest(id)) if id == request_id
        ));
    }

    #[test]
    fn a_decline_changes_nothing_but_telling_the_requester() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "web"), true, 0, 0);
        let request_id = attachments.request_control(bob.client, 0).unwrap();
        attachments
            .answer_control(alice.client, request_id, false, 0)
            .unwrap();
        assert!(attachments.is_current_controller(alice.generation));
        assert_eq!(attachments.generation_of(bob.client), None);
        assert_eq!(
            events(&attachments, bob.client),
            [ClientEvent::ControlDeclined { request_id }]
        );
    }

    #[test]
    fn bad_requests_and_answers_are_refused_and_leave_the_lease() {
        let mut attachments = Attachments::default();
        let share = attachments.attach(Role::Viewer, holder("share:1", "web"), false, 0, 0);
        assert!(matches!(
            attachments.request_control(share.client, 0),
            Err(Error::NoController) | Err(Error::MayOnlyView)
        ));
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "web"), true, 0, 0);
        assert!(matches!(
            attachments.request_control(share.client, 0),
            Err(Error::MayOnlyView)
        ));
        assert!(matches!(
            attachments.request_control(alice.client, 0),
            Err(Error::AlreadyControls)
        ));
        let request_id = attachments.request_control(bob.client, 0).unwrap();
        // Only the controller answers: not the requester, not another viewer.
        for answerer in [bob.client, share.client] {
            assert!(matches!(
                attachments.answer_control(answerer, request_id, true, 0),
                Err(Error::ViewerMayNot(ClientAction::AnswerControl))
            ));
        }
        assert!(matches!(
            attachments.answer_control(alice.client, request_id + 1, true, 0),
            Err(Error::UnknownControlRequest(_))
        ));
        assert!(attachments.is_current_controller(alice.generation));
        // A requester that left takes its request with it.
        attachments.detach(bob.client);
        assert!(matches!(
            attachments.answer_control(alice.client, request_id, true, 0),
            Err(Error::UnknownControlRequest(_))
        ));
        assert!(attachments.is_current_controller(alice.generation));

        // Nobody in control: nobody to ask.
        attachments.detach(alice.client);
        let carol = attachments.attach(Role::Viewer, holder("carol", "web"), true, 0, 0);
        assert!(matches!(
            attachments.request_control(carol.client, 0),
            Err(Error::NoController)
        ));
    }

    #[test]
    fn each_stream_has_one_request_pending_and_the_list_is_capped() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "web"), true, 0, 0);
        let request_id = attachments.request_control(bob.client, 0).unwrap();
        for _ in 0..1000 {
            assert!(matches!(
                attachments.request_control(bob.client, 0),
                Err(Error::ControlAlreadyRequested(id)) if id == request_id
            ));
        }
        assert_eq!(events(&attachments, alice.client).len(), 1, "told once");

        let others: Vec<Attached> = (1..=MAX_PENDING_CONTROL_REQUESTS)
            .map(|_| attachments.attach(Role::Viewer, holder("carol", "web"), true, 0, 0))
            .collect();
        let (last, first) = others.split_last().unwrap();
        for other in first {
            attachments.request_control(other.client, 0).unwrap();
        }
        assert!(matches!(
            attachments.request_control(last.client, 0),
            Err(Error::TooManyControlRequests(MAX_PENDING_CONTROL_REQUESTS))
        ));
        let controller = attachments.get(alice.client).unwrap();
        assert_eq!(controller.events.len(), MAX_PENDING_CONTROL_REQUESTS);
        assert!(!controller.overflowed);

        // An answer makes room; a decline lets the same stream ask again.
        attachments
            .answer_control(alice.client, request_id, false, 0)
            .unwrap();
        attachments.request_control(last.client, 0).unwrap();
        assert!(matches!(
            attachments.request_control(bob.client, 0),
            Err(Error::TooManyControlRequests(_))
        ));
        assert!(attachments.is_current_controller(alice.generation));
    }

    #[test]
    fn resizes_coalesce_and_a_flooded_queue_overflows() {
        let mut attachments = Attachments::default();
        let viewer = attachments.attach(Role::Viewer, TicketHolder::default(), false, 0, 0);
        for cols in 1..=1000 {
            attachments.broadcast(
                5,
                &ClientEvent::Resize(TerminalSize::new(cols, 10).unwrap()),
            );
        }
        let client = attachments.get(viewer.client).unwrap();
        assert_eq!(client.events.len(), 1);
        assert_eq!(
            client.events[0].event,
            ClientEvent::Resize(TerminalSize::new(1000, 10).unwrap())
        );
        for _ in 0..MAX_QUEUED_EVENTS {
            attachments.broadcast(5, &ClientEvent::Resetting);
        }
        assert!(attachments.get(viewer.client).unwrap().overflowed);
    }

    fn roles(attachments: &Attachments) -> Vec<(String, Role)> {
        attachments
            .presence(Instant::now())
            .into_iter()
            .map(|attendee| (attendee.principal, attendee.role))
            .collect()
    }

    #[test]
    fn shared_mode_makes_every_stream_that_wants_control_a_controller_without_a_takeover() {
        let mut attachments = Attachments::default();
        attachments.set_control_mode(ControlMode::Shared, 0);
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Controller, holder("bob", "cli"), true, 0, 0);
        // A stream that attached to watch watches, even with a ticket that admits a controller,
        // until it asks; a share only ever watches.
        let carol = attachments.attach(Role::Viewer, holder("carol", "web"), true, 0, 0);
        let share = attachments.attach(Role::Viewer, holder("share:1", "web"), false, 0, 0);

        assert_eq!(alice.superseded, None);
        assert_eq!(bob.superseded, None, "nobody is taken over");
        assert!(events(&attachments, alice.client).is_empty());
        for controller in [alice, bob] {
            assert!(attachments.is_current_controller(controller.generation));
        }
        assert_eq!(carol.generation, None);
        assert_eq!(
            roles(&attachments),
            [
                ("alice".to_owned(), Role::Controller),
                ("bob".to_owned(), Role::Controller),
                ("carol".to_owned(), Role::Viewer),
                ("share:1".to_owned(), Role::Viewer),
            ]
        );
        // Carol asks: nobody needs to answer, she controls at once and is told so.
        attachments.request_control(carol.client, 5).unwrap();
        assert!(attachments.is_current_controller(attachments.generation_of(carol.client)));
        assert_eq!(
            events(&attachments, carol.client).last(),
            Some(&ClientEvent::RoleChanged(Role::Controller))
        );
        assert!(matches!(
            attachments.request_control(carol.client, 5),
            Err(Error::AlreadyControls)
        ));
        assert_eq!(share.generation, None);
        assert!(!attachments.is_current_controller(share.generation));
        assert_eq!(
            roles(&attachments),
            [
                ("alice".to_owned(), Role::Controller),
                ("bob".to_owned(), Role::Controller),
                ("carol".to_owned(), Role::Controller),
                ("share:1".to_owned(), Role::Viewer),
            ]
        );
        assert_eq!(attachments.counts(), (3, 1));
        // A standing request has no stream to give control to; a share may not ask.
        assert!(matches!(
            attachments.request_control_for(holder("dave", "rest"), 0),
            Err(Error::SharedControl)
        ));
        assert!(matches!(
            attachments.request_control(share.client, 0),
            Err(Error::MayOnlyView)
        ));
        // One controller's end leaves the others in control.
        attachments.detach(alice.client);
        assert!(attachments.is_current_controller(bob.generation));
        assert_eq!(attachments.counts(), (2, 1));
    }

    #[test]
    fn shared_mode_holds_reading_for_the_controller_furthest_behind() {
        let mut attachments = Attachments::default();
        attachments.set_control_mode(ControlMode::Shared, 0);
        attachments.attach(Role::Controller, holder("alice", "web"), true, 40, 40);
        attachments.attach(Role::Controller, holder("bob", "web"), true, 10, 40);
        attachments.attach(Role::Viewer, holder("share:1", "web"), false, 0, 40);
        assert_eq!(
            attachments.controller_cursor(),
            Some(10),
            "a viewer holds nothing"
        );
    }

    #[test]
    fn changing_the_mode_moves_roles_on_the_same_streams() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "cli"), true, 0, 0);
        let share = attachments.attach(Role::Viewer, holder("share:1", "web"), false, 0, 0);
        // Dave watches and never asks: he goes on watching in the shared mode.
        let dave = attachments.attach(Role::Viewer, holder("dave", "web"), true, 0, 0);
        let request_id = attachments.request_control(bob.client, 0).unwrap();

        attachments.set_control_mode(ControlMode::Shared, 7);
        assert_eq!(
            roles(&attachments),
            [
                ("alice".to_owned(), Role::Controller),
                ("bob".to_owned(), Role::Controller),
                ("share:1".to_owned(), Role::Viewer),
                ("dave".to_owned(), Role::Viewer),
            ]
        );
        assert!(events(&attachments, dave.client).is_empty());
        assert!(
            attachments.is_current_controller(alice.generation),
            "alice kept hers"
        );
        assert!(attachments.is_current_controller(attachments.generation_of(bob.client)));
        assert_eq!(
            attachments.get(bob.client).unwrap().events.back(),
            Some(&QueuedEvent {
                after_offset: 7,
                event: ClientEvent::RoleChanged(Role::Controller)
            })
        );
        let told_alice = events(&attachments, alice.client);
        assert!(
            !told_alice.contains(&ClientEvent::RoleChanged(Role::Controller)),
            "alice controlled already: {told_alice:?}"
        );
        assert!(events(&attachments, share.client).is_empty());
        assert!(
            attachments
                .answer_control(alice.client, request_id, true, 7)
                .is_err(),
            "pending requests are gone"
        );

        // Back to exclusive: the longest attached controller keeps the lease.
        attachments.set_control_mode(ControlMode::Exclusive, 9);
        assert_eq!(
            roles(&attachments),
            [
                ("alice".to_owned(), Role::Controller),
                ("bob".to_owned(), Role::Viewer),
                ("share:1".to_owned(), Role::Viewer),
                ("dave".to_owned(), Role::Viewer),
            ]
        );
        assert!(attachments.is_current_controller(alice.generation));
        assert_eq!(attachments.generation_of(bob.client), None);
        assert_eq!(
            events(&attachments, bob.client).last(),
            Some(&ClientEvent::RoleChanged(Role::Viewer))
        );
        assert_eq!(attachments.counts(), (1, 3), "every stream stays attached");
        // The exclusive rules are back: bob may ask again.
        attachments.request_control(bob.client, 9).unwrap();
    }

    #[test]
    fn a_taken_over_stream_controls_again_when_the_mode_turns_shared() {
        let mut attachments = Attachments::default();
        let first = attachments.attach(Role::Controller, holder("alice", "grpc"), true, 0, 0);
        let second = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        assert!(!attachments.is_current_controller(first.generation));
        attachments.set_control_mode(ControlMode::Shared, 0);
        assert!(attachments.is_current_controller(attachments.generation_of(first.client)));
        assert!(attachments.is_current_controller(second.generation));
        // Setting the mode it has changes nothing and tells nobody.
        let before = events(&attachments, first.client);
        attachments.set_control_mode(ControlMode::Shared, 0);
        assert_eq!(events(&attachments, first.client), before);
    }
}
