//! Calls to session-api about what a terminal shows and does: screens, input, screen waits,
//! commands and `run`, and who controls it; each forwarded to the session's broker.

use std::time::Duration;

use ptyhub_model::proto::{ProtoEnum as _, optional_to_proto};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use ptyhub_wire::limits::{DEFAULT_WAIT_MS, MAX_WAIT_MS};

use crate::domain::{
    Command, CommandListing, CommandOutput, CommandOutputFormat, CommandPage, CommandRun,
    CommandRunResult, ControlRequest, ControlState, InputItem, InputWritten, Screen, ScreenRequest,
    ScreenWait, ScreenWaitResult,
};
use crate::error::ApiError;

use super::convert::{
    command_output_format_to_proto, millis, screen_from_proto, terminal_from_proto,
    wait_result_from_proto,
};
use super::{Upstreams, session_api_error};

impl Upstreams {
    /// Forwards a screen wait as it is, with a deadline of the wait's own timeout plus the time
    /// an answer may take: the one call that may outlast the channel's per-call bound.
    pub async fn forward_wait_for_screen(
        &self,
        message: session_pb::WaitForScreenRequest,
    ) -> Result<tonic::Response<broker_pb::WaitForScreenResponse>, tonic::Status> {
        let deadline = self.waiting_deadline(message.timeout_ms);
        let mut request = tonic::Request::new(message);
        request.set_timeout(deadline);
        self.session_api_waits
            .clone()
            .wait_for_screen(request)
            .await
    }

    /// Forwards a `Run` as it is, which waits for the command it types to end: like a screen
    /// wait, with a deadline of its own timeout plus the time an answer may take.
    pub async fn forward_run(
        &self,
        message: session_pb::RunRequest,
    ) -> Result<tonic::Response<broker_pb::RunResponse>, tonic::Status> {
        let deadline = self.waiting_deadline(message.timeout_ms);
        let mut request = tonic::Request::new(message);
        request.set_timeout(deadline);
        self.session_api_waits.clone().run(request).await
    }

    /// How long a call that waits `timeout_ms` (0: the default) may take to answer.
    fn waiting_deadline(&self, timeout_ms: u32) -> Duration {
        let timeout_ms = match timeout_ms {
            0 => DEFAULT_WAIT_MS,
            // A timeout over the maximum is refused upstream, quickly; it needs no longer bound.
            timeout_ms => timeout_ms.min(MAX_WAIT_MS),
        };
        Duration::from_millis(timeout_ms.into()) + self.answer_margin
    }

    pub async fn get_screen(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        screen: ScreenRequest,
    ) -> Result<Screen, ApiError> {
        let request = session_pb::GetScreenRequest {
            instance: instance_id.to_owned(),
            session_id: session_id.to_string(),
            format: screen.format.to_proto(),
            scrollback: screen.scrollback,
        };
        let screen = self
            .session_api
            .clone()
            .get_screen(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        screen_from_proto(screen)
    }

    /// Types `items` in order, all or nothing; `force` types even while a client holds control.
    pub async fn send_input(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        items: Vec<InputItem>,
        force: bool,
    ) -> Result<InputWritten, ApiError> {
        use broker_pb::input_item::Item;
        let items = items
            .into_iter()
            .map(|item| broker_pb::InputItem {
                item: Some(match item {
                    InputItem::Text(text) => Item::Text(text),
                    InputItem::Key(key) => Item::Key(key),
                }),
            })
            .collect();
        let written = self
            .session_api
            .clone()
            .send_input(session_pb::SendInputRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                items,
                force,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(InputWritten {
            bytes_written: written.bytes_written,
            offset: written.output_offset,
        })
    }

    pub async fn wait_for_screen(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        wait: ScreenWait,
    ) -> Result<ScreenWaitResult, ApiError> {
        let request = session_pb::WaitForScreenRequest {
            instance: instance_id.to_owned(),
            session_id: session_id.to_string(),
            pattern: wait.pattern,
            timeout_ms: millis(wait.timeout),
            quiet_ms: millis(wait.quiet),
            after_offset: wait.after_offset,
            format: wait.screen.format.to_proto(),
            scrollback: wait.screen.scrollback,
            wait_for: optional_to_proto(wait.state),
        };
        let answer = self
            .forward_wait_for_screen(request)
            .await
            .map_err(session_api_error)?
            .into_inner();
        wait_result_from_proto(answer)
    }

    /// A page of the commands the session's shell ran, oldest first, with what its terminal
    /// is doing.
    pub async fn list_commands(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        listing: CommandListing,
    ) -> Result<CommandPage, ApiError> {
        let page = self
            .session_api
            .clone()
            .list_commands(session_pb::ListCommandsRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                after: listing.after,
                limit: listing.limit,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        Ok(CommandPage {
            commands: page.commands.into_iter().map(Command::from).collect(),
            first_kept_id: page.first_kept_id,
            last_id: page.last_id,
            terminal: terminal_from_proto(page.terminal).unwrap_or_default(),
        })
    }

    /// One command's output: NOT_FOUND for a command the session does not keep, `Gone` when
    /// neither the ring nor the session's recording holds all of it (the message says how much
    /// is lost).
    pub async fn command_output(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        command_id: u64,
        format: CommandOutputFormat,
    ) -> Result<CommandOutput, ApiError> {
        let format = command_output_format_to_proto(format);
        let output = self
            .session_api
            .clone()
            .get_command_output(session_pb::GetCommandOutputRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                command_id,
                format: format as i32,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        let command = output
            .command
            .ok_or_else(|| ApiError::internal("session-api answered output without its command"))?;
        Ok(CommandOutput {
            command: Command::from(command),
            data: output.data,
        })
    }

    /// Types a command at the session's shell prompt and answers once it ended: the command
    /// and its output. INVALID_ARGUMENT (no shell integration), FAILED_PRECONDITION (not at
    /// the prompt, or control held without `force`) and DEADLINE_EXCEEDED (it goes on running)
    /// come back with the broker's words.
    pub async fn run(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        run: CommandRun,
    ) -> Result<CommandRunResult, ApiError> {
        let answer = self
            .forward_run(session_pb::RunRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
                command: run.command,
                timeout_ms: run.timeout_ms,
                force: run.force,
                format: command_output_format_to_proto(run.format) as i32,
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        let command = answer
            .command
            .ok_or_else(|| ApiError::internal("session-api answered a run without its command"))?;
        Ok(CommandRunResult {
            command: Command::from(command),
            output: answer.output,
            truncated: answer.truncated,
        })
    }
}

impl Upstreams {
    /// Who controls the session and who asks to (docs/CONTRACT.md, "Control requests").
    pub async fn control_state(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
    ) -> Result<ControlState, ApiError> {
        let state = self
            .session_api
            .clone()
            .get_control(session_pb::GetControlRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        control_state_from_proto(state)
    }

    /// A standing request for control by the principal these upstreams act for.
    pub async fn request_control(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
    ) -> Result<ControlRequest, ApiError> {
        let request = self
            .session_api
            .clone()
            .request_control(session_pb::RequestControlRequest {
                instance: instance_id.to_owned(),
                session_id: session_id.to_string(),
            })
            .await
            .map_err(session_api_error)?
            .into_inner();
        ControlRequest::try_from(request).map_err(|invalid| {
            ApiError::internal(format!(
                "session-api answered a bad control request: {invalid}"
            ))
        })
    }

    /// Grants (or declines) request `request_id` as the principal these upstreams act for;
    /// the control state after it.
    pub async fn answer_control(
        &self,
        instance_id: &str,
        session_id: &(impl std::fmt::Display + ?Sized),
        request_id: u64,
        grant: bool,
    ) -> Result<ControlState, ApiError> {
        let request = session_pb::AnswerControlRequest {
            instance: instance_id.to_owned(),
            session_id: session_id.to_string(),
            request_id,
        };
        let mut session_api = self.session_api.clone();
        let answered = if grant {
            session_api.grant_control(request).await
        } else {
            session_api.decline_control(request).await
        };
        control_state_from_proto(answered.map_err(session_api_error)?.into_inner())
    }
}

fn control_state_from_proto(state: broker_pb::ControlState) -> Result<ControlState, ApiError> {
    ControlState::try_from(state).map_err(|invalid| {
        ApiError::internal(format!(
            "session-api answered a bad control state: {invalid}"
        ))
    })
}
