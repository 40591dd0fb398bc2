//! The webhooks' tables: [`CreateWebhooks`].

use sea_orm_migration::prelude::*;

use super::{Instances, timestamp};

#[derive(DeriveIden)]
enum Webhooks {
    Table,
    Id,
    InstanceId,
    Url,
    Events,
    Secret,
    CreatedBy,
    CreatedAt,
    DroppedEvents,
    LastDeliveryId,
    LastEvent,
    LastAttemptAt,
    LastAttempts,
    LastStatusCode,
    LastError,
    LastOutcome,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    WebhookId,
    Event,
    EventKey,
    Body,
    CreatedAt,
    Attempts,
    Outcome,
    NextAttemptAt,
    LeaseUntil,
    Claim,
}

/// Webhooks, deleted with their instance, and the queue of their deliveries, deleted with their
/// webhook. One event is one delivery per webhook: `(webhook_id, event_key)` is unique.
pub(super) struct CreateWebhooks;

impl MigrationName for CreateWebhooks {
    // Stored in `seaql_migrations`: never rename.
    fn name(&self) -> &str {
        "m20261205_000003_create_webhooks"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateWebhooks {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Webhooks::Table)
                    .col(ColumnDef::new(Webhooks::Id).uuid().not_null().primary_key())
                    .col(ColumnDef::new(Webhooks::InstanceId).uuid().not_null())
                    .col(ColumnDef::new(Webhooks::Url).text().not_null())
                    .col(ColumnDef::new(Webhooks::Events).string().not_null())
                    .col(ColumnDef::new(Webhooks::Secret).text().not_null())
                    .col(ColumnDef::new(Webhooks::CreatedBy).string().not_null())
                    .col(timestamp(Webhooks::CreatedAt))
                    .col(
                        ColumnDef::new(Webhooks::DroppedEvents)
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .col(ColumnDef::new(Webhooks::LastDeliveryId).uuid().null())
                    .col(ColumnDef::new(Webhooks::LastEvent).string().null())
                    .col(
                        ColumnDef::new(Webhooks::LastAttemptAt)
                            .timestamp_with_time_zone()
                            .null(),
                    )
                    .col(ColumnDef::new(Webhooks::LastAttempts).integer().null())
                    .col(ColumnDef::new(Webhooks::LastStatusCode).integer().null())
                    .col(ColumnDef::new(Webhooks::LastError).text().null())
                    .col(ColumnDef::new(Webhooks::LastOutcome).string().null())
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_webhooks_instance")
                            .from(Webhooks::Table, Webhooks::InstanceId)
                            .to(Instances::Table, Instances::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhooks_instance")
                    .table(Webhooks::Table)
                    .col(Webhooks::InstanceId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .col(
                        ColumnDef::new(WebhookDeliveries::Id)
                            .uuid()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(WebhookDeliveries::WebhookId)
                            .uuid()
                            .not_null(),
                    )
                    .col(ColumnDef::new(WebhookDeliveries::Event).string().not_null())
                    .col(
                        ColumnDef::new(WebhookDeliveries::EventKey)
                            .string()
                            .not_null(),
                    )
                    .col(ColumnDef::new(WebhookDeliveries::Body).text().not_null())
                    .col(timestamp(WebhookDeliveries::CreatedAt))
                    .col(
                        ColumnDef::new(WebhookDeliveries::Attempts)
                            .integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WebhookDeliveries::Outcome)
                            .string()
                            .not_null(),
                    )
                    .col(timestamp(WebhookDeliveries::NextAttemptAt))
                    .col(
                        ColumnDef::new(WebhookDeliveries::LeaseUntil)
                            .timestamp_with_time_zone()
                            .null(),
                    )
                    .col(ColumnDef::new(WebhookDeliveries::Claim).uuid().null())
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_webhook_deliveries_webhook")
                            .from(WebhookDeliveries::Table, WebhookDeliveries::WebhookId)
                            .to(Webhooks::Table, Webhooks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        // One delivery per webhook and event, however many replicas queue it.
        manager
            .create_index(
                Index::create()
                    .name("uq_webhook_deliveries_event")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::WebhookId)
                    .col(WebhookDeliveries::EventKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // The deliveries that are due, in order; the finished ones past their retention.
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_deliveries_due")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::Outcome)
                    .col(WebhookDeliveries::NextAttemptAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            WebhookDeliveries::Table.into_iden(),
            Webhooks::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
