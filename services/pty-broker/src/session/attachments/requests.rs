//! Requests for control, as resources of the session (docs/CONTRACT.md, "Control requests"):
//! each pending request has an id, a requester and a time, whether a stream made it on itself
//! or a caller without a stream made it for its principal (a standing request: REST, gRPC,
//! MCP). The controller's stream is sent every request as `ControlRequested`; a request is
//! answered by id, by the controller's stream or by the controller's principal.
//!
//! A grant gives the lease to the requester: to its own stream, or (a standing request) to the
//! newest stream of its principal that may control. A principal without such a stream gets the
//! lease **reserved** for [`RESERVATION_LIFETIME`]: the granter's stream reads on as a viewer,
//! and the principal's next attach that may control becomes the controller.
//!
//! With a grant timeout (an instance setting), a request nobody answered within it is granted
//! when it passes, as though the controller had granted it; without one it waits for an answer.
//! A standing request that is never answered ends after [`STANDING_REQUEST_LIFETIME`].
//!
//! Every answer is noted as a [`ControlChange`], which the session task takes and publishes for
//! the audit trail (a takeover is recorded from the attaches, by session-api).
//!
//! A broker hand-off carries the grant timeout, the standing requests and a reservation to the
//! next process ([`FrozenControl`]), each with the time it has left; a stream's request ends
//! with its stream, which every hand-off ends.

use std::time::{Duration, SystemTime};

use ptyhub_attach_ticket::TicketHolder;
use ptyhub_model::ControlMode;
use tokio::time::Instant;

use super::{Attachments, ClientId, ControllerLease, MAX_PENDING_CONTROL_REQUESTS, queue_event};
use crate::domain::{
    ClientEvent, ControlChange, ControlChangeKind, ControlRequest, ControlState, ReservedControl,
    Role,
};
use crate::error::{ClientAction, Error};

/// How long a standing request waits for its answer before it ends.
pub const STANDING_REQUEST_LIFETIME: Duration = Duration::from_secs(600);

/// How long control granted to a principal without a stream is held for its next attach.
pub const RESERVATION_LIFETIME: Duration = Duration::from_secs(60);

/// A request for control waiting for its answer.
#[derive(Debug, Clone)]
pub(super) struct PendingRequest {
    pub holder: TicketHolder,
    /// The stream that asked on itself; `None` for a standing request.
    pub stream: Option<ClientId>,
    pub since: SystemTime,
    /// When it was made, on the task's clock: the grant timeout counts from here.
    pub asked_at: Instant,
}

/// Control held for a principal that was granted it without a stream that may control.
#[derive(Debug, Clone)]
pub(super) struct Reservation {
    pub principal: String,
    pub until: Instant,
    pub until_wall: SystemTime,
}

/// The control state one broker process hands to the next: what outlives the streams (which a
/// hand-off ends, and with them the requests they made).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrozenControl {
    /// The instance's grant timeout, given at the spawn.
    pub grant_timeout: Option<Duration>,
    /// The last request id given out: the next process gives only later ones, so that an answer
    /// to a request that ended with the hand-off never settles another.
    pub last_request_id: u64,
    /// The standing requests still waiting, oldest first.
    pub standing_requests: Vec<FrozenRequest>,
    /// Control reserved for a principal's next attach.
    pub reservation: Option<FrozenReservation>,
}

/// A standing request as it is handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrozenRequest {
    pub id: u64,
    pub holder: TicketHolder,
    /// When it was made, as the control state shows it.
    pub since: SystemTime,
    /// How long it has waited: its grant timeout and its lifetime go on counting from there.
    pub waited: Duration,
}

/// A reservation as it is handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrozenReservation {
    pub principal: String,
    /// What is left of it.
    pub left: Duration,
}

impl Attachments {
    /// The control state to hand to the next broker process, as of `now`: the grant timeout,
    /// the standing requests that have not ended, and a reservation that has not.
    pub fn freeze_control(&self, now: Instant) -> FrozenControl {
        let standing_requests = self
            .requests
            .iter()
            .filter(|(_, request)| {
                request.stream.is_none() && !self.standing_request_ended(request, now)
            })
            .map(|(&id, request)| FrozenRequest {
                id,
                holder: request.holder.clone(),
                since: request.since,
                waited: now.saturating_duration_since(request.asked_at),
            })
            .collect();
        let reservation = self
            .live_reservation(now)
            .map(|reservation| FrozenReservation {
                principal: reservation.principal.clone(),
                left: reservation.until.saturating_duration_since(now),
            });
        FrozenControl {
            grant_timeout: self.grant_timeout,
            last_request_id: self.next_request,
            standing_requests,
            reservation,
        }
    }

    /// These attachments, with no client yet, going on with the control state a previous
    /// broker process handed over. Each request and the reservation keep the time they had
    /// left, bounded by their lifetimes (a longer one is the predecessor's mistake); a request
    /// past [`MAX_PENDING_CONTROL_REQUESTS`], one without a principal, or one whose id repeats
    /// an earlier one is dropped with a warning, never the session.
    pub fn with_frozen_control(mut self, control: FrozenControl) -> Self {
        let now = Instant::now();
        self.grant_timeout = control.grant_timeout;
        self.next_request = control.last_request_id;
        for request in control.standing_requests {
            let acceptable = !request.holder.principal.is_empty()
                && !self.requests.contains_key(&request.id)
                && self.requests.len() < MAX_PENDING_CONTROL_REQUESTS;
            if !acceptable {
                tracing::warn!(
                    request_id = request.id,
                    principal = %request.holder.principal,
                    "a handed-over request for control dropped"
                );
                continue;
            }
            let waited = request.waited.min(STANDING_REQUEST_LIFETIME);
            self.next_request = self.next_request.max(request.id);
            self.requests.insert(
                request.id,
                PendingRequest {
                    holder: request.holder,
                    stream: None,
                    since: request.since,
                    asked_at: now.checked_sub(waited).unwrap_or(now),
                },
            );
        }
        self.reservation = control
            .reservation
            .filter(|reservation| !reservation.principal.is_empty())
            .map(|reservation| {
                let left = reservation.left.min(RESERVATION_LIFETIME);
                Reservation {
                    principal: reservation.principal,
                    until: now + left,
                    until_wall: SystemTime::now() + left,
                }
            });
        self
    }

    /// Sets how long a request may wait unanswered before it is granted; `None`: forever.
    /// A new session's attachments with the instance's grant timeout.
    pub fn with_grant_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.set_grant_timeout(timeout);
        self
    }

    pub fn set_grant_timeout(&mut self, timeout: Option<Duration>) {
        self.grant_timeout = timeout;
    }

    /// Sends the controller `requester`'s request for control, queued at `end`; in the shared
    /// mode, where nobody is asked, the stream joins the controllers at once. Refused for a
    /// stream whose ticket only views, for a stream that controls already, when nobody
    /// controls, for a
    /// stream whose earlier request is still pending (one each, so a viewer cannot flood the
    /// controller), and past [`MAX_PENDING_CONTROL_REQUESTS`]. Returns the request's id.
    pub fn request_control(&mut self, requester: ClientId, end: u64) -> Result<u64, Error> {
        let now = Instant::now();
        self.expire(now);
        let Some(client) = self.clients.get(&requester) else {
            return Err(Error::SessionClosed);
        };
        if !client.may_control {
            return Err(Error::MayOnlyView);
        }
        if self.mode == ControlMode::Shared {
            return self.join_shared_controllers(requester, end);
        }
        let lease = self.controller.ok_or(Error::NoController)?;
        if lease.client == requester {
            return Err(Error::AlreadyControls);
        }
        if let Some((&pending, _)) = self
            .requests
            .iter()
            .find(|(_, request)| request.stream == Some(requester))
        {
            return Err(Error::ControlAlreadyRequested(pending));
        }
        let holder = client.holder.clone();
        let request = self.add_request(holder, Some(requester), now, end)?;
        if let Some(client) = self.clients.get_mut(&requester) {
            client.wants_control = true;
        }
        Ok(request.id)
    }

    /// A watching stream's request in the shared mode: granted at once, since every stream
    /// that wants control has it (audited as a grant from nobody). Returns the request's id.
    fn join_shared_controllers(&mut self, requester: ClientId, end: u64) -> Result<u64, Error> {
        let client = self
            .clients
            .get_mut(&requester)
            .ok_or(Error::SessionClosed)?;
        if client.generation.is_some() {
            return Err(Error::AlreadyControls);
        }
        self.generation += 1;
        client.generation = Some(self.generation);
        client.wants_control = true;
        let holder = client.holder.clone();
        queue_event(client, end, ClientEvent::RoleChanged(Role::Controller));
        self.next_request += 1;
        let request_id = self.next_request;
        self.note_change(ControlChangeKind::Granted, request_id, None, holder);
        Ok(request_id)
    }

    /// A standing request for control by `holder`, who has no stream to ask on: the
    /// controller's stream (if one holds the lease) is sent it at `end`. One per principal;
    /// refused for a holder that names nobody, for the principal that controls, and past
    /// [`MAX_PENDING_CONTROL_REQUESTS`]. Unlike a stream's, it may wait while nobody controls.
    pub fn request_control_for(
        &mut self,
        holder: TicketHolder,
        end: u64,
    ) -> Result<ControlRequest, Error> {
        let now = Instant::now();
        self.expire(now);
        if holder.principal.is_empty() {
            return Err(Error::RequesterUnnamed);
        }
        if self.mode == ControlMode::Shared {
            return Err(Error::SharedControl);
        }
        if self.controller_principal() == Some(holder.principal.as_str()) {
            return Err(Error::PrincipalControls(holder.principal));
        }
        if let Some((&pending, _)) = self
            .requests
            .iter()
            .find(|(_, request)| request.holder.principal == holder.principal)
        {
            return Err(Error::PrincipalAlreadyAsked {
                principal: holder.principal,
                request_id: pending,
            });
        }
        self.add_request(holder, None, now, end)
    }

    /// `answerer`'s answer to request `request_id`, queued at `end`. Only the current
    /// controller's stream answers, and only a request still pending. A grant gives the
    /// requester the lease and the answerer none; each is told its new role. A decline tells
    /// the requester and changes nothing else.
    pub fn answer_control(
        &mut self,
        answerer: ClientId,
        request_id: u64,
        grant: bool,
        end: u64,
    ) -> Result<(), Error> {
        let now = Instant::now();
        self.expire(now);
        self.controller
            .filter(|lease| lease.client == answerer)
            .ok_or(if self.generation_of(answerer).is_some() {
                Error::TakenOver(ClientAction::AnswerControl)
            } else {
                Error::ViewerMayNot(ClientAction::AnswerControl)
            })?;
        self.settle(request_id, grant, now, end)
    }

    /// `principal`'s answer to request `request_id`, made without a stream, queued at `end`.
    /// The controller's principal answers (the one whose stream holds the lease, or for whom
    /// it is reserved); while nobody controls, anyone the gateway let ask (a credential that
    /// may control). A decline by the requester's own principal withdraws its request.
    pub fn answer_control_as(
        &mut self,
        principal: &str,
        request_id: u64,
        grant: bool,
        end: u64,
    ) -> Result<(), Error> {
        let now = Instant::now();
        self.expire(now);
        let withdrawal = !grant
            && self
                .requests
                .get(&request_id)
                .is_some_and(|request| request.holder.principal == principal);
        if withdrawal {
            let request = self.requests.remove(&request_id).expect("looked up above");
            if let Some(stream) = request.stream {
                self.push_event(stream, end, ClientEvent::ControlDeclined { request_id });
            }
            return Ok(());
        }
        if let Some(controller) = self.controller_principal()
            && controller != principal
        {
            return Err(Error::NotTheController(controller.to_owned()));
        }
        self.settle(request_id, grant, now, end)
    }

    /// Grants the oldest request that waited the grant timeout out, as of `now`, queued at
    /// `end`; ends standing requests and a reservation that outlived their time. Whether
    /// anything changed (the task then publishes the presence).
    pub fn grant_overdue(&mut self, now: Instant, end: u64) -> bool {
        let expired = self.expire(now);
        let Some(timeout) = self.grant_timeout else {
            return expired;
        };
        let overdue = self
            .requests
            .iter()
            .find(|(_, request)| request.asked_at + timeout <= now)
            .map(|(&id, _)| id);
        let Some(request_id) = overdue else {
            return expired;
        };
        let request = self.requests.remove(&request_id).expect("found above");
        self.give_control(
            request_id,
            request,
            ControlChangeKind::GrantedByTimeout,
            now,
            end,
        );
        true
    }

    /// When [`Attachments::grant_overdue`] has something to do next: a request's grant timeout
    /// or a standing request's end.
    pub fn next_control_deadline(&self) -> Option<Instant> {
        self.requests
            .values()
            .flat_map(|request| {
                let ends = request
                    .stream
                    .is_none()
                    .then_some(request.asked_at + STANDING_REQUEST_LIFETIME);
                let granted = self.grant_timeout.map(|timeout| request.asked_at + timeout);
                ends.into_iter().chain(granted)
            })
            .min()
    }

    /// Who controls, the reservation, and every pending request, oldest first, as of `now`.
    pub fn control_state(&self, now: Instant) -> ControlState {
        let controller = self.controller.and_then(|lease| {
            let client = self.clients.get(&lease.client)?;
            Some(self.attendee(lease.client, client, now))
        });
        let reserved_for = self
            .live_reservation(now)
            .map(|reservation| ReservedControl {
                principal: reservation.principal.clone(),
                until: reservation.until_wall.into(),
            });
        let requests = self
            .requests
            .iter()
            .filter(|(_, request)| !self.standing_request_ended(request, now))
            .map(|(&id, request)| control_request(id, request))
            .collect();
        ControlState {
            controller,
            reserved_for,
            requests,
        }
    }

    /// Takes the changes of control noted since they were last taken, oldest first.
    pub fn take_control_changes(&mut self) -> Vec<ControlChange> {
        std::mem::take(&mut self.control_changes)
    }

    /// Whether a stream of `holder` that may control, attaching now, is owed the lease reserved
    /// for its principal; the reservation is used up when it is.
    pub(super) fn take_reservation(&mut self, holder: &TicketHolder, may_control: bool) -> bool {
        let owed = may_control
            && self
                .live_reservation(Instant::now())
                .is_some_and(|reservation| reservation.principal == holder.principal);
        if owed {
            self.reservation = None;
        }
        owed
    }

    /// Forgets the requests `client` made on itself: its stream ended.
    pub(super) fn forget_requests_of(&mut self, client: ClientId) {
        self.requests
            .retain(|_, request| request.stream != Some(client));
    }

    fn add_request(
        &mut self,
        holder: TicketHolder,
        stream: Option<ClientId>,
        now: Instant,
        end: u64,
    ) -> Result<ControlRequest, Error> {
        if self.requests.len() >= MAX_PENDING_CONTROL_REQUESTS {
            return Err(Error::TooManyControlRequests(MAX_PENDING_CONTROL_REQUESTS));
        }
        let requester = self.requester_attendee(&holder, stream, now);
        self.next_request += 1;
        let request_id = self.next_request;
        let request = PendingRequest {
            holder,
            stream,
            since: SystemTime::now(),
            asked_at: now,
        };
        let answer = control_request(request_id, &request);
        self.requests.insert(request_id, request);
        if let Some(lease) = self.controller {
            self.push_event(
                lease.client,
                end,
                ClientEvent::ControlRequested {
                    request_id,
                    requester,
                },
            );
        }
        Ok(answer)
    }

    /// The requester as the controller is shown it: its stream's attendee, or for a standing
    /// request a viewer of the caller's surface, since now.
    fn requester_attendee(
        &self,
        holder: &TicketHolder,
        stream: Option<ClientId>,
        now: Instant,
    ) -> crate::domain::Attendee {
        if let Some(id) = stream
            && let Some(client) = self.clients.get(&id)
        {
            return self.attendee(id, client, now);
        }
        crate::domain::Attendee {
            principal: holder.principal.clone(),
            role: Role::Viewer,
            surface: holder.surface.clone(),
            since: SystemTime::now().into(),
            typing: false,
        }
    }

    /// Answers pending request `request_id`: a grant gives control, a decline tells the
    /// requester's stream.
    fn settle(
        &mut self,
        request_id: u64,
        grant: bool,
        now: Instant,
        end: u64,
    ) -> Result<(), Error> {
        let request = self
            .requests
            .remove(&request_id)
            .ok_or(Error::UnknownControlRequest(request_id))?;
        if grant {
            self.give_control(request_id, request, ControlChangeKind::Granted, now, end);
            return Ok(());
        }
        if let Some(stream) = request.stream {
            self.push_event(stream, end, ClientEvent::ControlDeclined { request_id });
        }
        let from = self.controller_holder();
        self.note_change(
            ControlChangeKind::Declined,
            request_id,
            from,
            request.holder,
        );
        Ok(())
    }

    /// Moves the lease to `request`'s requester: its stream, or the newest stream of its
    /// principal that may control, or (none attached) a reservation for the principal. The
    /// previous controller reads on as a viewer; requests to it go unanswered, since the new
    /// controller never saw them.
    fn give_control(
        &mut self,
        request_id: u64,
        request: PendingRequest,
        kind: ControlChangeKind,
        now: Instant,
        end: u64,
    ) {
        let from = self.controller_holder();
        let previous = self.controller.take();
        if let Some(previous) = previous
            && let Some(client) = self.clients.get_mut(&previous.client)
        {
            client.generation = None;
            // It gave control away: it does not take it back if the mode turns shared.
            client.wants_control = false;
        }
        let target = request
            .stream
            .filter(|stream| self.clients.contains_key(stream))
            .or_else(|| self.newest_stream_that_may_control(&request.holder.principal));
        match target {
            Some(target) => {
                self.generation += 1;
                let generation = self.generation;
                self.controller = Some(ControllerLease {
                    client: target,
                    generation,
                });
                if let Some(client) = self.clients.get_mut(&target) {
                    client.generation = Some(generation);
                    client.wants_control = true;
                }
                self.reservation = None;
                self.push_event(target, end, ClientEvent::RoleChanged(Role::Controller));
            }
            None => {
                self.reservation = Some(Reservation {
                    principal: request.holder.principal.clone(),
                    until: now + RESERVATION_LIFETIME,
                    until_wall: SystemTime::now() + RESERVATION_LIFETIME,
                });
            }
        }
        if let Some(previous) = previous
            && Some(previous.client) != target
        {
            self.push_event(previous.client, end, ClientEvent::RoleChanged(Role::Viewer));
        }
        self.requests.clear();
        self.note_change(kind, request_id, from, request.holder);
    }

    fn newest_stream_that_may_control(&self, principal: &str) -> Option<ClientId> {
        self.clients
            .iter()
            .filter(|(_, client)| client.may_control && client.holder.principal == principal)
            .map(|(&id, _)| id)
            .max()
    }

    /// The principal control answers to: the holder of the lease's stream, or the one it is
    /// reserved for.
    fn controller_principal(&self) -> Option<&str> {
        if let Some(lease) = self.controller {
            return self
                .clients
                .get(&lease.client)
                .map(|client| client.holder.principal.as_str());
        }
        self.live_reservation(Instant::now())
            .map(|reservation| reservation.principal.as_str())
    }

    fn controller_holder(&self) -> Option<TicketHolder> {
        if let Some(lease) = self.controller {
            return self
                .clients
                .get(&lease.client)
                .map(|client| client.holder.clone());
        }
        self.live_reservation(Instant::now())
            .map(|reservation| TicketHolder {
                principal: reservation.principal.clone(),
                surface: String::new(),
            })
    }

    fn live_reservation(&self, now: Instant) -> Option<&Reservation> {
        self.reservation
            .as_ref()
            .filter(|reservation| now < reservation.until)
    }

    fn standing_request_ended(&self, request: &PendingRequest, now: Instant) -> bool {
        request.stream.is_none() && request.asked_at + STANDING_REQUEST_LIFETIME <= now
    }

    /// Ends what outlived its time as of `now`: standing requests and the reservation.
    /// Whether anything ended.
    fn expire(&mut self, now: Instant) -> bool {
        let before = self.requests.len();
        self.requests.retain(|_, request| {
            request.stream.is_some() || now < request.asked_at + STANDING_REQUEST_LIFETIME
        });
        let reservation_ended = self
            .reservation
            .as_ref()
            .is_some_and(|reservation| now >= reservation.until);
        if reservation_ended {
            self.reservation = None;
        }
        reservation_ended || self.requests.len() != before
    }

    fn note_change(
        &mut self,
        kind: ControlChangeKind,
        request_id: u64,
        from: Option<TicketHolder>,
        to: TicketHolder,
    ) {
        self.control_changes.push(ControlChange {
            kind,
            from,
            to,
            request_id,
            at: SystemTime::now(),
        });
    }
}

fn control_request(id: u64, request: &PendingRequest) -> ControlRequest {
    ControlRequest {
        id,
        principal: request.holder.principal.clone(),
        surface: request.holder.surface.clone(),
        since: request.since.into(),
        stream: request.stream.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::advance;

    use super::*;

    fn holder(principal: &str, surface: &str) -> TicketHolder {
        TicketHolder {
            principal: principal.to_owned(),
            surface: surface.to_owned(),
        }
    }

    fn events(attachments: &Attachments, client: ClientId) -> Vec<ClientEvent> {
        attachments
            .clients
            .get(&client)
            .expect("attached")
            .events
            .iter()
            .map(|queued| queued.event.clone())
            .collect()
    }

    fn controller_principal(attachments: &Attachments) -> Option<String> {
        attachments
            .control_state(Instant::now())
            .controller
            .map(|attendee| attendee.principal)
    }

    #[tokio::test(start_paused = true)]
    async fn a_standing_request_is_shown_to_the_controller_and_listed() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let request = attachments
            .request_control_for(holder("agent", "mcp"), 0)
            .unwrap();
        assert_eq!(
            (request.principal.as_str(), request.surface.as_str()),
            ("agent", "mcp")
        );
        assert!(!request.stream);
        let [
            ClientEvent::ControlRequested {
                request_id,
                requester,
            },
        ]: [ClientEvent; 1] = events(&attachments, alice.client).try_into().unwrap()
        else {
            panic!("the controller is sent the request");
        };
        assert_eq!(request_id, request.id);
        assert_eq!(
            (requester.principal.as_str(), requester.role),
            ("agent", Role::Viewer)
        );
        let state = attachments.control_state(Instant::now());
        assert_eq!(state.requests, [request]);
        assert_eq!(controller_principal(&attachments).as_deref(), Some("alice"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_to_a_principal_with_a_stream_moves_the_lease_to_it() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "cli"), true, 0, 0);
        let request = attachments
            .request_control_for(holder("bob", "rest"), 0)
            .unwrap();

        attachments
            .answer_control_as("alice", request.id, true, 0)
            .unwrap();
        assert!(attachments.is_current_controller(attachments.generation_of(bob.client)));
        assert_eq!(attachments.generation_of(alice.client), None);
        assert_eq!(
            events(&attachments, bob.client),
            [ClientEvent::RoleChanged(Role::Controller)]
        );
        assert_eq!(
            events(&attachments, alice.client).last(),
            Some(&ClientEvent::RoleChanged(Role::Viewer))
        );
        let state = attachments.control_state(Instant::now());
        assert_eq!(controller_principal(&attachments).as_deref(), Some("bob"));
        assert!(state.requests.is_empty() && state.reserved_for.is_none());
        let [change]: [ControlChange; 1] = attachments.take_control_changes().try_into().unwrap();
        assert_eq!(change.kind, ControlChangeKind::Granted);
        assert_eq!(change.from, Some(holder("alice", "web")));
        assert_eq!(change.to, holder("bob", "rest"));
        assert_eq!(change.request_id, request.id);
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_to_a_principal_without_a_stream_reserves_control_for_its_next_attach() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let request = attachments
            .request_control_for(holder("agent", "mcp"), 0)
            .unwrap();
        attachments
            .answer_control_as("alice", request.id, true, 0)
            .unwrap();
        // Alice reads on as a viewer; nobody holds the lease, which waits for the agent.
        assert_eq!(attachments.generation_of(alice.client), None);
        assert_eq!(
            events(&attachments, alice.client).last(),
            Some(&ClientEvent::RoleChanged(Role::Viewer))
        );
        let state = attachments.control_state(Instant::now());
        assert_eq!(state.controller, None);
        let reserved = state.reserved_for.expect("reserved");
        assert_eq!(reserved.principal, "agent");
        // Only the agent answers requests now, even without a stream.
        let carol = attachments
            .request_control_for(holder("carol", "rest"), 0)
            .unwrap();
        assert!(matches!(
            attachments.answer_control_as("alice", carol.id, true, 0),
            Err(Error::NotTheController(principal)) if principal == "agent"
        ));

        // Another principal's view-only attach changes nothing; the agent's takes control.
        let viewer = attachments.attach(Role::Viewer, holder("carol", "web"), true, 0, 0);
        assert_eq!(attachments.generation_of(viewer.client), None);
        let agent = attachments.attach(Role::Viewer, holder("agent", "mcp"), true, 0, 0);
        assert!(attachments.is_current_controller(agent.generation));
        assert_eq!(controller_principal(&attachments).as_deref(), Some("agent"));
        assert_eq!(attachments.control_state(Instant::now()).reserved_for, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_ends_after_its_lifetime() {
        let mut attachments = Attachments::default();
        attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let request = attachments
            .request_control_for(holder("agent", "mcp"), 0)
            .unwrap();
        attachments
            .answer_control_as("alice", request.id, true, 0)
            .unwrap();
        advance(RESERVATION_LIFETIME).await;
        assert_eq!(attachments.control_state(Instant::now()).reserved_for, None);
        let late = attachments.attach(Role::Viewer, holder("agent", "mcp"), true, 0, 0);
        assert_eq!(late.generation, None, "too late: a viewer like any other");
    }

    #[tokio::test(start_paused = true)]
    async fn bad_standing_requests_and_answers_are_refused_and_leave_the_lease() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        assert!(matches!(
            attachments.request_control_for(TicketHolder::default(), 0),
            Err(Error::RequesterUnnamed)
        ));
        assert!(matches!(
            attachments.request_control_for(holder("alice", "rest"), 0),
            Err(Error::PrincipalControls(principal)) if principal == "alice"
        ));
        let request = attachments
            .request_control_for(holder("bob", "rest"), 0)
            .unwrap();
        assert!(matches!(
            attachments.request_control_for(holder("bob", "mcp"), 0),
            Err(Error::PrincipalAlreadyAsked { principal, request_id })
                if principal == "bob" && request_id == request.id
        ));
        // Only the controller's principal answers: not the requester's grant, not a third.
        for answerer in ["bob", "mallory", ""] {
            assert!(matches!(
                attachments.answer_control_as(answerer, request.id, true, 0),
                Err(Error::NotTheController(principal)) if principal == "alice"
            ));
        }
        assert!(matches!(
            attachments.answer_control_as("alice", request.id + 1, true, 0),
            Err(Error::UnknownControlRequest(_))
        ));
        assert!(attachments.is_current_controller(alice.generation));
        assert_eq!(attachments.control_state(Instant::now()).requests.len(), 1);
        assert!(attachments.take_control_changes().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_requester_withdraws_its_request_by_declining_it() {
        let mut attachments = Attachments::default();
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "web"), true, 0, 0);
        let request_id = attachments.request_control(bob.client, 0).unwrap();
        attachments
            .answer_control_as("bob", request_id, false, 0)
            .unwrap();
        assert!(
            attachments
                .control_state(Instant::now())
                .requests
                .is_empty()
        );
        assert_eq!(
            events(&attachments, bob.client),
            [ClientEvent::ControlDeclined { request_id }]
        );
        assert!(attachments.is_current_controller(alice.generation));
        // A controller's decline is one for the audit trail; a withdrawal is not.
        assert!(attachments.take_control_changes().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_request_is_granted_when_the_grant_timeout_passes() {
        let mut attachments = Attachments::default();
        attachments.set_grant_timeout(Some(Duration::from_secs(30)));
        let alice = attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = attachments.attach(Role::Viewer, holder("bob", "web"), true, 0, 0);
        let request_id = attachments.request_control(bob.client, 0).unwrap();
        let due = attachments.next_control_deadline().expect("a deadline");
        assert_eq!(due, Instant::now() + Duration::from_secs(30));

        advance(Duration::from_secs(29)).await;
        assert!(!attachments.grant_overdue(Instant::now(), 0), "not yet");
        assert!(attachments.is_current_controller(alice.generation));
        advance(Duration::from_secs(1)).await;
        assert!(attachments.grant_overdue(Instant::now(), 0));
        assert!(attachments.is_current_controller(attachments.generation_of(bob.client)));
        let [change]: [ControlChange; 1] = attachments.take_control_changes().try_into().unwrap();
        assert_eq!(
            (change.kind, change.request_id),
            (ControlChangeKind::GrantedByTimeout, request_id)
        );
        assert_eq!(attachments.next_control_deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_grant_timeout_a_request_to_a_session_nobody_controls_waits() {
        let mut attachments = Attachments::default();
        attachments.attach(Role::Viewer, holder("carol", "web"), true, 0, 0);
        let request = attachments
            .request_control_for(holder("agent", "mcp"), 0)
            .unwrap();
        advance(STANDING_REQUEST_LIFETIME - Duration::from_secs(1)).await;
        assert!(!attachments.grant_overdue(Instant::now(), 0));
        assert_eq!(
            attachments.control_state(Instant::now()).requests,
            std::slice::from_ref(&request)
        );
        // While nobody controls, a credential that may control answers it.
        attachments
            .answer_control_as("carol", request.id, true, 0)
            .unwrap();
        assert_eq!(
            attachments
                .control_state(Instant::now())
                .reserved_for
                .map(|reserved| reserved.principal)
                .as_deref(),
            Some("agent")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_standing_request_ends_after_its_lifetime() {
        let mut attachments = Attachments::default();
        attachments.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        attachments
            .request_control_for(holder("agent", "mcp"), 0)
            .unwrap();
        assert_eq!(
            attachments.next_control_deadline(),
            Some(Instant::now() + STANDING_REQUEST_LIFETIME)
        );
        advance(STANDING_REQUEST_LIFETIME).await;
        assert!(attachments.grant_overdue(Instant::now(), 0), "it ended");
        assert!(
            attachments
                .control_state(Instant::now())
                .requests
                .is_empty()
        );
        // And the agent may ask again.
        attachments
            .request_control_for(holder("agent", "mcp"), 0)
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_standing_request_and_the_grant_timeout_go_on_after_a_hand_off() {
        let mut before = Attachments::default();
        before.set_grant_timeout(Some(Duration::from_secs(300)));
        before.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let bob = before.attach(Role::Viewer, holder("bob", "web"), true, 0, 0);
        before.request_control(bob.client, 0).unwrap();
        let agent = before
            .request_control_for(holder("agent", "mcp"), 0)
            .unwrap();
        advance(Duration::from_secs(120)).await;

        let frozen = before.freeze_control(Instant::now());
        // Bob's request ends with his stream; the agent's stands, 120 s old.
        assert_eq!(
            frozen.standing_requests,
            [FrozenRequest {
                id: agent.id,
                holder: holder("agent", "mcp"),
                since: agent.since.into(),
                waited: Duration::from_secs(120),
            }]
        );
        assert_eq!(frozen.grant_timeout, Some(Duration::from_secs(300)));
        assert_eq!(frozen.last_request_id, agent.id);

        let mut after =
            Attachments::after_generation(before.generation()).with_frozen_control(frozen);
        assert_eq!(
            after.control_state(Instant::now()).requests,
            std::slice::from_ref(&agent)
        );
        // The agent's request is granted 180 s on, as it would have been on the first process.
        assert_eq!(
            after.next_control_deadline(),
            Some(Instant::now() + Duration::from_secs(180))
        );
        advance(Duration::from_secs(180)).await;
        assert!(after.grant_overdue(Instant::now(), 0));
        let [change]: [ControlChange; 1] = after.take_control_changes().try_into().unwrap();
        assert_eq!(
            (change.kind, change.request_id),
            (ControlChangeKind::GrantedByTimeout, agent.id)
        );
        // Ids go on after the last one given out, never repeating a request that ended.
        let carol = after
            .request_control_for(holder("carol", "rest"), 0)
            .unwrap();
        assert!(carol.id > agent.id, "{} after {}", carol.id, agent.id);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_goes_on_after_a_hand_off_for_what_was_left_of_it() {
        let mut before = Attachments::default();
        before.attach(Role::Controller, holder("alice", "web"), true, 0, 0);
        let carol = before
            .request_control_for(holder("carol", "rest"), 0)
            .unwrap();
        before
            .answer_control_as("alice", carol.id, true, 0)
            .unwrap();
        advance(Duration::from_secs(20)).await;

        let frozen = before.freeze_control(Instant::now());
        let left = RESERVATION_LIFETIME - Duration::from_secs(20);
        assert_eq!(
            frozen.reservation,
            Some(FrozenReservation {
                principal: "carol".to_owned(),
                left,
            })
        );
        let mut after = Attachments::default().with_frozen_control(frozen);
        let reserved = after.control_state(Instant::now()).reserved_for;
        assert_eq!(
            reserved.map(|reserved| reserved.principal).as_deref(),
            Some("carol")
        );
        // Only carol answers a request meanwhile; the reservation ends when its time is up.
        let dave = after
            .request_control_for(holder("dave", "rest"), 0)
            .unwrap();
        assert!(matches!(
            after.answer_control_as("alice", dave.id, true, 0),
            Err(Error::NotTheController(principal)) if principal == "carol"
        ));
        advance(left).await;
        assert!(
            after.grant_overdue(Instant::now(), 0),
            "the reservation ended"
        );
        assert_eq!(after.control_state(Instant::now()).reserved_for, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handed_over_request_without_a_principal_or_with_a_repeated_id_is_dropped() {
        let request = |id, principal: &str| FrozenRequest {
            id,
            holder: holder(principal, "rest"),
            since: SystemTime::now(),
            waited: Duration::ZERO,
        };
        let handed = FrozenControl {
            grant_timeout: None,
            last_request_id: 2,
            standing_requests: vec![request(1, "agent"), request(1, "bob"), request(2, "")],
            reservation: Some(FrozenReservation {
                principal: "carol".to_owned(),
                left: Duration::from_secs(3600),
            }),
        };
        let attachments = Attachments::default().with_frozen_control(handed);
        let state = attachments.control_state(Instant::now());
        let kept: Vec<(u64, &str)> = state
            .requests
            .iter()
            .map(|request| (request.id, request.principal.as_str()))
            .collect();
        assert_eq!(kept, [(1, "agent")]);
        // A reservation longer than a reservation lasts is held for one lifetime at most.
        assert_eq!(
            attachments
                .live_reservation(Instant::now())
                .map(|reservation| reservation.until),
            Some(Instant::now() + RESERVATION_LIFETIME)
        );
    }
}
